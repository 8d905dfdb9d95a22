"""`awa_worker --processes N`: runs N worker processes and forwards stop signals to them."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from types import FrameType

logger = logging.getLogger("awa_django.worker")

# A child that dies within this many seconds of starting is failing at start-up (bad
# settings, unreachable code): restart it with growing pauses instead of every second.
EARLY_DEATH = 5.0
MAX_RESTART_PAUSE = 30.0
# Tells a child its supervisor's pid: a child whose supervisor died (even by SIGKILL)
# drains and exits instead of running on as an orphan.
SUPERVISOR_ENV = "AWA_SUPERVISOR_PID"
# Each child's index (0..N-1): `--metrics-port P` serves child i on port P + i.
WORKER_INDEX_ENV = "AWA_WORKER_INDEX"


class Supervisor:
    def __init__(self, processes: int, child_args: list[str]) -> None:
        self.count = processes
        # The same entry point the supervisor was started with (manage.py or django-admin),
        # so children import the project however the user runs it.
        self.command = [sys.executable, sys.argv[0], "awa_worker", *child_args]
        self.children: list[subprocess.Popen[bytes]] = []
        self.started_at: list[float] = []
        self.pause = 1.0
        self.stopping: int | None = None  # the signal that asked us to stop
        self.signals = 0  # how many stop signals we received: a second one means "now"
        self._told: dict[int, int] = {}  # child pid → stop signals forwarded to it

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for _ in range(self.count):
            self._start(len(self.children))
        while True:
            if self.stopping is not None:
                self._forward(self.stopping)
                if all(c.poll() is not None for c in self.children):
                    return max(c.returncode or 0 for c in self.children)
            else:
                self._restart_dead()
            time.sleep(0.1)

    def _start(self, index: int) -> None:
        # Own process group: a terminal's Ctrl-C (or systemd's group-wide SIGTERM) reaches
        # only the supervisor, which forwards exactly one signal, so children drain
        # instead of treating a duplicate as "exit now".
        env = {**os.environ, SUPERVISOR_ENV: str(os.getpid()), WORKER_INDEX_ENV: str(index)}
        child = subprocess.Popen(self.command, process_group=0, env=env)
        if index < len(self.children):
            self.children[index], self.started_at[index] = child, time.monotonic()
        else:
            self.children.append(child)
            self.started_at.append(time.monotonic())

    def _restart_dead(self) -> None:
        for index, child in enumerate(self.children):
            code = child.poll()
            if code is None:
                continue
            early = time.monotonic() - self.started_at[index] < EARLY_DEATH
            self.pause = min(self.pause * 2, MAX_RESTART_PAUSE) if early else 1.0
            logger.error(
                "worker process %s exited with %s; restarting in %.0fs", child.pid, code, self.pause
            )
            time.sleep(self.pause)
            if self.stopping is None:
                self._start(index)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = signum
        self.signals += 1

    def _forward(self, signum: int) -> None:
        """Each child gets as many stop signals as we did: one drains, two exit at once."""
        for child in self.children:
            if child.poll() is None and self._told.get(child.pid, 0) < self.signals:
                child.send_signal(signum)
                self._told[child.pid] = self._told.get(child.pid, 0) + 1
