"""Moves due `scheduled` and `retryable` jobs to `available` and wakes their queues."""

from __future__ import annotations

from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.worker.database import Database

BATCH = 4096
# Per run: a huge backlog is promoted over several ticks, so the leader lease is renewed
# (and rescue runs) in between instead of waiting behind one long promotion.
MAX_BATCHES = 32


class Promoter:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def run_once(self) -> int:
        total = 0
        for _ in range(MAX_BATCHES):
            promoted = await self.db.run(maintenance_sql.job_promote_due(limit=BATCH))
            total += promoted
            if promoted < BATCH:
                break
        return total
