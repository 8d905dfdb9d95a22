"""Keeps this process's row in `awa_worker_instances` fresh (for the dashboard) and logs
throughput once a minute."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable

from awa_django.registry import registry
from awa_django.storage.sql import workers as workers_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Database

logger = logging.getLogger("awa_django.worker")

REFRESH_SECONDS = 5.0


class Registrar:
    def __init__(
        self,
        db: Database,
        worker_id: str,
        queues: dict[str, int],
        is_leader: Callable[[], bool],
        completed: Callable[[], int],
        log_interval: float,
        hooks_dropped: Callable[[], int] = lambda: 0,
    ) -> None:
        self.db = db
        self.worker_id = worker_id
        self.queues = queues
        self.is_leader = is_leader
        self.completed = completed
        self.log_interval = log_interval
        self.hooks_dropped = hooks_dropped
        self.shutting_down = False
        self._last_log = (time.monotonic(), 0)

    async def run_once(self) -> None:
        await self.db.run(
            workers_sql.worker_instance_upsert(
                worker_id=self.worker_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                queues=json.dumps(self.queues),
                leader=self.is_leader(),
                shutting_down=self.shutting_down,
                completed_count=self.completed(),
                kinds=json.dumps(sorted(d.kind for d in registry.jobs())),
                serves_tasks=registry.resolves_on_demand,
                hooks_dropped=self.hooks_dropped(),
            )
        )

    def log_throughput(self) -> None:
        now, completed = time.monotonic(), self.completed()
        since, before = self._last_log
        if now - since >= self.log_interval:
            rate = (completed - before) / (now - since)
            logger.info(
                "worker %s: %d jobs completed in the last %.0fs (%.1f/s)",
                self.worker_id,
                completed - before,
                now - since,
                rate,
            )
            self._last_log = (now, completed)

    async def deregister(self) -> None:
        try:
            await self.db.run(workers_sql.worker_instance_delete(worker_id=self.worker_id))
        except TRANSIENT_ERRORS as exc:
            logger.warning("could not deregister worker (%s); the leader forgets it later", exc)
