"""Deletes terminal jobs and dead letters past their retention, in small batches, forgets
workers that vanished without deregistering, and drops finished bulk operations after
FAILED_RETENTION."""

from __future__ import annotations

from awa_django.storage.query import Query
from awa_django.storage.sql import bulk as bulk_sql
from awa_django.storage.sql import dead_letters as dead_letters_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql import workers as workers_sql
from awa_django.worker.database import Database

BATCH = 1000
MAX_BATCHES = 10  # per run: a large backlog is worked off over several runs
FORGET_WORKERS_AFTER = 3600.0


class Pruner:
    def __init__(
        self,
        db: Database,
        completed_retention: float,
        failed_retention: float,
        dead_letter_retention: float = 30 * 86400.0,
    ) -> None:
        self.db = db
        self.prune = maintenance_sql.job_prune_terminal(
            completed_seconds=completed_retention, failed_seconds=failed_retention, limit=BATCH
        )
        self.prune_dead_letters = dead_letters_sql.dead_letter_prune(
            retention_seconds=dead_letter_retention, limit=BATCH
        )
        self.prune_operations = bulk_sql.bulk_operation_prune(
            older_than_seconds=failed_retention, limit=BATCH
        )

    async def run_once(self) -> int:
        """How many terminal jobs and dead letters were deleted."""
        total = await self._batches(self.prune)
        total += await self._batches(self.prune_dead_letters)
        await self.db.run(
            workers_sql.worker_instance_prune(older_than_seconds=FORGET_WORKERS_AFTER)
        )
        await self.db.run(self.prune_operations)
        return total

    async def _batches(self, prune: Query[int]) -> int:
        total = 0
        for _ in range(MAX_BATCHES):
            deleted = await self.db.run(prune)
            total += deleted
            if deleted < BATCH:
                break
        return total
