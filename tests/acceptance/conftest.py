"""Real `manage.py awa_worker` subprocesses against the test database."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from testproject.shop.demo import database_url

ROOT = Path(__file__).resolve().parents[2]

# Timings that make crash detection take about a second instead of minutes.
FAST = [
    "--poll-interval",
    "0.1",
    "--heartbeat-interval",
    "0.2",
    "--heartbeat-staleness",
    "1",
    "--rescue-interval",
    "0.2",
    "--promote-interval",
    "0.1",
    "--leader-ttl",
    "1",
    "--election-interval",
    "0.2",
    "--shutdown-grace",
    "10",
]


class WorkerProcess:
    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        """`env` adds to (or overrides, DATABASE_URL included) the worker's environment."""
        self.log = log
        environment = {
            **os.environ,
            "DATABASE_URL": database_url(connection.settings_dict),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "awa_worker", *args],
                cwd=ROOT,
                env=environment,
                stdout=out,
                stderr=subprocess.STDOUT,
                process_group=0,  # its own group, as under a shell: see signal_group()
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def signal_group(self, sig: int) -> None:
        """Like a terminal's Ctrl-C: the signal reaches every process of the group."""
        os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        # A supervisor's children notice their parent is gone and drain; make sure.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, fast: bool = True, env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(
            [*(FAST if fast else []), *args], tmp_path / f"worker-{len(started)}.log", env
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()
        if os.environ.get("AWA_SHOW_WORKER_LOGS"):
            print(worker.output())
