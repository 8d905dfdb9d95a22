"""A real PgBouncer in transaction-pooling mode in front of the test PostgreSQL, started
by a test (its config in a fresh directory, trust auth, a free port) and stopped after."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

# .ci/run sets it: there a missing pgbouncer fails the test instead of skipping it.
REQUIRED_ENV = "AWA_REQUIRE_PGBOUNCER"


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)),
        None,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PgBouncer:
    """`pgbouncer` in the foreground, pool_mode=transaction, forwarding every database
    name to the server in `settings_dict` (Django's, for the test database)."""

    def __init__(self, binary: str, settings_dict: dict[str, Any]) -> None:
        self.server = settings_dict
        self.user = settings_dict.get("USER") or "postgres"
        self.port = free_port()
        # Not pytest's tmp_path: PgBouncer refuses to run as root, so under root it runs
        # as `postgres` (-u) and needs a directory that user can write.
        self.dir = Path(tempfile.mkdtemp(prefix="awa-pgbouncer-"))
        self.dir.chmod(0o755)
        self.log = self.dir / "pgbouncer.log"
        config = self._write_config()
        as_root = ["-u", "postgres"] if os.geteuid() == 0 else []
        if as_root:
            record = pwd.getpwnam("postgres")
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, record.pw_uid, record.pw_gid)
        self.proc = subprocess.Popen(
            [binary, *as_root, str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )

    def _write_config(self) -> Path:
        host = self.server.get("HOST") or "127.0.0.1"
        target = f"host={host} port={self.server.get('PORT') or 5432}"
        if self.server.get("PASSWORD"):
            target += f" user={self.user} password={self.server['PASSWORD']}"
        (self.dir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        config = self.dir / "pgbouncer.ini"
        config.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = {target}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.dir / 'userlist.txt'}",
                    f"admin_users = {self.user}",
                    "pool_mode = transaction",
                    # Several server connections, handed out in turn (FIFO, not PgBouncer's
                    # default LIFO): a client's consecutive transactions land on different
                    # backends, so anything that leans on session state (a prepared
                    # statement, a SET, a LISTEN) breaks here, as under real load.
                    "default_pool_size = 10",
                    "min_pool_size = 4",
                    "server_round_robin = 1",
                    "max_client_conn = 200",
                    f"logfile = {self.log}",
                    f"pidfile = {self.dir / 'pgbouncer.pid'}",
                    "",
                ]
            )
        )
        return config

    def url(self, database: str) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{database}"

    def wait_ready(self, database: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"pgbouncer exited {self.proc.returncode}: {self.output()}")
            try:
                with psycopg.connect(self.url(database), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def show(self, what: str) -> str:
        """The admin console's `SHOW <what>` (psql: the console speaks the simple protocol)."""
        address = ["-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", "pgbouncer"]
        done = subprocess.run(
            ["psql", "-X", "-A", "-F", "|", *address, "-c", f"SHOW {what}"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
