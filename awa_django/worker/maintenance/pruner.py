"""Deletes terminal jobs and dead letters past their retention, forgets workers that
vanished without deregistering, and drops finished bulk operations after the failed
retention and finished batches once no member of theirs is left (decision 043).

Terminal jobs are deleted in batches of BATCH until a batch comes back short: whatever the
backlog, a queue finishing 1,000 jobs a second must be pruned at least that fast, or its
table grows without bound. The batches run in the background, so promotion and rescue
never wait behind a large backlog, and they pause between batches so that pruning keeps
one database connection busy at most BUSY_FRACTION of the time (the bulk operations' rule,
decision 024, with a smaller share: pruning is never urgent). At about 20 ms per batch
that is still some 5,000 rows a second, and the drain the workers are doing meanwhile
keeps its rate (docs/performance.md)."""

from __future__ import annotations

import asyncio
import logging
import time

from awa_django.storage.query import Query
from awa_django.storage.sql import bulk as bulk_sql
from awa_django.storage.sql import dead_letters as dead_letters_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql import workers as workers_sql
from awa_django.storage.sql import workflows as workflows_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Database

logger = logging.getLogger("awa_django.worker")

BATCH = 1000
BUSY_FRACTION = 0.1
FORGET_WORKERS_AFTER = 3600.0


class Pruner:
    def __init__(
        self,
        db: Database,
        completed_retention: float,
        failed_retention: float,
        dead_letter_retention: float = 30 * 86400.0,
        busy_fraction: float = BUSY_FRACTION,
    ) -> None:
        self.db = db
        self.busy_fraction = busy_fraction
        self.prune = maintenance_sql.job_prune_terminal(
            completed_seconds=completed_retention, failed_seconds=failed_retention, limit=BATCH
        )
        self.prune_dead_letters = dead_letters_sql.dead_letter_prune(
            retention_seconds=dead_letter_retention, limit=BATCH
        )
        self.prune_operations = bulk_sql.bulk_operation_prune(
            older_than_seconds=failed_retention, limit=BATCH
        )
        # A batch's members are pruned on the jobs' retentions first; the batch row then
        # waits out the completed retention from its last member's end.
        self.prune_batches = workflows_sql.batch_prune_finished(
            older_than_seconds=completed_retention, limit=BATCH
        )
        self.task: asyncio.Task[int] | None = None

    async def run_once(self) -> None:
        """Start a pass over the retention backlog, unless one is still working it off."""
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self.prune_all())

    async def prune_all(self) -> int:
        """Delete every terminal job and dead letter past its retention, paced; returns how
        many. A database error ends the pass: the next one starts over."""
        try:
            total = await self._batches(self.prune)
            total += await self._batches(self.prune_dead_letters)
            await self._batches(self.prune_batches)
            await self.db.run(
                workers_sql.worker_instance_prune(older_than_seconds=FORGET_WORKERS_AFTER)
            )
            await self.db.run(self.prune_operations)
        except TRANSIENT_ERRORS as exc:
            logger.warning("pruning failed: %s", exc)
            return 0
        except Exception:
            # A background task: nobody awaits it, so say it here; the next pass retries.
            logger.exception("pruning failed")
            return 0
        return total

    async def _batches(self, prune: Query[int]) -> int:
        total = 0
        while True:
            began = time.monotonic()
            deleted = await self.db.run(prune)
            total += deleted
            if deleted < BATCH:
                return total
            busy = time.monotonic() - began
            await asyncio.sleep(busy * (1 - self.busy_fraction) / self.busy_fraction)
