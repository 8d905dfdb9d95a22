"""Moves due `scheduled` and `retryable` jobs to `available` and wakes their queues; and
admits jobs waiting for a concurrency-key slot that a release could not hand over
(storage/sql/keys.py, decision 045)."""

from __future__ import annotations

from awa_django.storage.sql import keys as keys_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.worker.database import Database

BATCH = 4096
# Per run: a huge backlog is promoted over several ticks, so the leader lease is renewed
# (and rescue runs) in between instead of waiting behind one long promotion.
MAX_BATCHES = 32
# Keys whose waiting line one tick looks at (each admits at most its head per tick).
WAITING_KEYS = 1024


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
        for _ in range(MAX_BATCHES):
            # Each pass admits at most one job per key: a key with several free slots (its
            # max was raised) fills over a few passes.
            if not await self.db.run(keys_sql.job_admit_waiting(limit=WAITING_KEYS)):
                break
        return total
