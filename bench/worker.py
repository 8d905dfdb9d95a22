"""One `manage.py awa_worker` subprocess for a scenario: start, watch, stop, never leak.

The worker runs in its own session (process group), so a supervisor started with
`--processes N` and its children can be killed together if SIGTERM does not end them in
time. Output goes to a log file whose tail is shown when something fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from . import procfs

REPO = Path(__file__).resolve().parent.parent
STOP_TIMEOUT = 30.0
PR_SET_CHILD_SUBREAPER = 36


# A deployed worker imports compiled bytecode (pip compiles what it installs). With
# PYTHONDONTWRITEBYTECODE set in the caller's shell, every worker start would compile the
# project's ~180 modules from source first (0.1 s of a 0.5 s start-up, measured), so the
# workers run without it, and the project's bytecode is compiled once per bench run before
# the first start (into the __pycache__ directories git ignores; the venv's came with pip).
@functools.cache
def compile_bytecode() -> None:
    sources = ["awa_django", "bench", "testproject", "manage.py"]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *sources], cwd=REPO, check=True)


class WorkerFailed(RuntimeError):
    """The worker exited on its own, or did not start."""


class WorkerProcess:
    """`with WorkerProcess(...) as worker:` starts it; leaving the block stops it."""

    def __init__(
        self,
        queue: str = "bench",
        concurrency: int = 10,
        processes: int = 1,
        extra_env: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
        profile_to: Path | None = None,
    ) -> None:
        self.command = [
            sys.executable,
            str(REPO / "manage.py"),
            "awa_worker",
            "--queue",
            f"{queue}={concurrency}",
            "--shutdown-grace",
            "5",
            *(["--processes", str(processes)] if processes > 1 else []),
            *(extra_args or []),
        ]
        # The slow hook and OpenTelemetry are opt-in per scenario, never inherited from
        # the caller's shell.
        opt_in = ("AWA_BENCH_SLOW_HOOK", "AWA_BENCH_OTEL")
        inherited = {k: v for k, v in os.environ.items() if k not in opt_in}
        self.env = {**inherited, "DJANGO_SETTINGS_MODULE": "bench.settings", **(extra_env or {})}
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.process: subprocess.Popen[bytes] | None = None
        self.profile_to = profile_to
        self.profiler: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.stop_seconds: float | None = None
        self._log: IO[bytes] | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> WorkerProcess:
        compile_bytecode()
        become_subreaper()
        self._log = tempfile.NamedTemporaryFile(prefix="awa-bench-worker-", suffix=".log")
        self.started_at = time.time()
        self.process = subprocess.Popen(
            self.command,
            cwd=REPO,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if self.profile_to is not None:
            self.profiler = start_profiler(self.process.pid, self.profile_to)
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.stop()
        finally:
            if self.profiler is not None:
                stop_profiler(self.profiler)
            if self._log is not None:
                self._log.close()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM, wait up to `timeout`, then SIGKILL its process group; finally kill any
        process it left behind (children of a --processes supervisor have their own
        process groups; as we are their subreaper they become our children)."""
        process = self.process
        if process is None:
            return
        try:
            if process.poll() is None:
                self._terminate(process, timeout)
        finally:
            self._kill_leftovers()

    def _terminate(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
            self.stop_seconds = time.monotonic() - began
        except subprocess.TimeoutExpired:
            print(f"worker {process.pid} ignored SIGTERM: killing", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def _kill_leftovers(self) -> None:
        spared = {os.getpid(), *([self.profiler.pid] if self.profiler else [])}
        for pid in set(procfs.tree(os.getpid())) - spared:
            print(f"killing leftover worker process {pid}", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    # -- observation --------------------------------------------------------------------
    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def check_alive(self) -> None:
        """Raise WorkerFailed (with the log tail) if the worker has exited."""
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            raise WorkerFailed(f"worker exited with code {code}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        if self._log is None:
            return ""
        text = Path(self._log.name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def become_subreaper() -> None:
    """Adopt orphaned descendants (Linux prctl PR_SET_CHILD_SUBREAPER) so none escapes."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


# -- optional py-spy sampling of the worker (figures of profiled runs are not comparable) ---
def start_profiler(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """`py-spy record` on the worker and its children; collapsed stacks go to `output`."""
    py_spy = os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy"
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [py_spy, "record", "--pid", str(pid), "--subprocesses", "--rate", "200"]
    command += ["--format", "raw", "--output", str(output)]
    if os.environ.get("PY_SPY_GIL"):
        command.append("--gil")
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_profiler(profiler: subprocess.Popen[bytes]) -> None:
    # py-spy writes its output and exits once the target exits; SIGINT makes it do so early.
    try:
        profiler.wait(timeout=10)
    except subprocess.TimeoutExpired:
        profiler.send_signal(signal.SIGINT)
        try:
            profiler.wait(timeout=10)
        except subprocess.TimeoutExpired:
            profiler.kill()
            profiler.wait(timeout=5)
