"""`awa_worker --processes N`: runs N worker processes and forwards stop signals to them."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from types import FrameType

logger = logging.getLogger("awa_django.worker")

RESTART_DELAY = 1.0


class Supervisor:
    def __init__(self, processes: int, child_args: list[str]) -> None:
        self.count = processes
        self.command = [sys.executable, "-m", "django", "awa_worker", *child_args]
        self.children: list[subprocess.Popen[bytes]] = []
        self.stopping = False

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._forward)
        signal.signal(signal.SIGINT, self._forward)
        self.children = [self._start() for _ in range(self.count)]
        while True:
            for index, child in enumerate(self.children):
                code = child.poll()
                if code is not None and not self.stopping:
                    logger.error("worker process %s exited with %s; restarting", child.pid, code)
                    time.sleep(RESTART_DELAY)
                    self.children[index] = self._start()
            if self.stopping and all(c.poll() is not None for c in self.children):
                return max(c.returncode or 0 for c in self.children)
            time.sleep(0.1)

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.command)

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signum)
