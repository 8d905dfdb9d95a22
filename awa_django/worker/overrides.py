"""Re-reads the runtime overrides of this worker's queues (`Client.set_queue_limits`) every
OVERRIDE_REFRESH_INTERVAL and hands changes to the dispatchers: one small query per worker
per interval, never one per claim. Decision 017."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from awa_django.limits import RateLimit
from awa_django.storage.sql import queues as queues_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Database
from awa_django.worker.dispatcher import Dispatcher

logger = logging.getLogger("awa_django.worker")

Limits = tuple[int | None, RateLimit | None]
NO_OVERRIDE: Limits = (None, None)


class OverrideReader:
    def __init__(self, db: Database, dispatchers: Sequence[Dispatcher], interval: float) -> None:
        self.db = db
        self.dispatchers = {d.queue.name: d for d in dispatchers}
        self.interval = interval
        self.applied: dict[str, Limits] = {}

    async def run_once(self) -> dict[str, Limits]:
        """Read the overrides; apply and log those that changed. Returns the current ones."""
        rows = await self.db.run(queues_sql.queue_state_overrides(queues=list(self.dispatchers)))
        found: dict[str, Limits] = {
            queue: (concurrency, RateLimit(rate, burst) if rate is not None else None)
            for queue, concurrency, rate, burst in rows
        }
        for name, dispatcher in self.dispatchers.items():
            limits = found.get(name, NO_OVERRIDE)
            if limits != self.applied.get(name, NO_OVERRIDE):
                dispatcher.apply_limits(*limits)
                logger.info("queue %r limits now: %s", name, dispatcher.describe())
        self.applied = found
        return found

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.run_once()
            except TRANSIENT_ERRORS as exc:
                logger.warning("reading the queue overrides failed: %s", exc)
