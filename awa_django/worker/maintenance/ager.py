"""Priority aging of one queue: available jobs gain one priority level per `interval`
seconds waited, up to conf.AGING_TOP_PRIORITY (decision 018)."""

from __future__ import annotations

from awa_django.storage.sql import aging as aging_sql
from awa_django.worker.database import Database

BATCH = 1000
# Per run: a larger backlog ages over the next runs, so the leader lease is renewed (and
# the other services run) in between.
MAX_BATCHES = 20


class Ager:
    """Scheduled every `interval` seconds: a job aged at one pass is due again at the next,
    so each pass finds the rows it must lift without walking ones that are not due."""

    def __init__(self, db: Database, queue: str, interval: float) -> None:
        self.db = db
        self.age = aging_sql.job_age_priority(queue=queue, interval=interval, limit=BATCH)

    async def run_once(self) -> int:
        total = 0
        for _ in range(MAX_BATCHES):
            aged = await self.db.run(self.age)
            total += aged
            if aged < BATCH:
                break
        return total
