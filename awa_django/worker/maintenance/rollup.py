"""Rolls the jobs that finalized each minute up into one row per queue and minute
(`awa_queue_rollups`, the dashboard's history) and prunes rows past ROLLUP_RETENTION.
Decision 021."""

from __future__ import annotations

from awa_django.storage.sql import rollups as rollups_sql
from awa_django.worker.database import Database

# Each run re-rolls the last few complete minutes: a minute a leader change or an outage
# skipped is filled in by the next run (the statement is idempotent).
MINUTES_PER_RUN = 5
INTERVAL = 60.0


class Rollup:
    def __init__(self, db: Database, retention: float) -> None:
        self.db = db
        self.rollup = rollups_sql.queue_rollup_minutes(minutes=MINUTES_PER_RUN)
        self.prune = rollups_sql.queue_rollup_prune(retention_seconds=retention)

    async def run_once(self) -> int:
        """Write the recent minutes' rows; how many it wrote."""
        written = await self.db.run(self.rollup)
        await self.db.run(self.prune)
        return written
