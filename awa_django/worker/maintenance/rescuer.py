"""Rescues attempts whose heartbeat went stale or whose deadline passed, and parked jobs
whose callback timed out; emits one event per rescue in this (the leader's) process:
`Rescued` for a job that will retry, `Exhausted` (with the rescue's `reason`) for a job
whose last attempt it was (attempts are a hard bound, decision 009; one committed
transition, one event, decision 035), moved to the dead letters on a dead-letter queue
(decision 016); and inserts their follow-up jobs, best-effort, once the rescue committed
(decision 015)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from awa_django.events import Event, Exhausted, Rescued
from awa_django.execution import follow_ups
from awa_django.snapshot import JobSnapshot
from awa_django.states import JobState
from awa_django.storage.sql import leases as leases_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql.transitions import dead_lettered
from awa_django.worker.database import Database

logger = logging.getLogger("awa_django.worker")

BATCH = 500
STALE_HEARTBEAT = "stale_heartbeat"
DEADLINE_EXCEEDED = "deadline_exceeded"
EXPIRED_CALLBACK = "expired_callback"


class Rescuer:
    def __init__(
        self,
        db: Database,
        staleness: float,
        emit: Callable[[Event], None],
        dead_letter_queues: Sequence[str] = (),
    ) -> None:
        self.db = db
        self.staleness = staleness
        self.emit = emit
        # A last attempt rescued on these queues moves the job to the dead letters; the
        # statements move exactly the failed rows of these queues (decision 016).
        self.dead_letter_queues = tuple(dead_letter_queues)

    async def run_once(self) -> list[tuple[str, JobSnapshot]]:
        rescued = [
            *[(STALE_HEARTBEAT, r) for r in await self._stale_heartbeats()],
            *[(DEADLINE_EXCEEDED, r) for r in await self._passed_deadlines()],
            *[(EXPIRED_CALLBACK, r) for r in await self._expired_callbacks()],
        ]
        for reason, row in rescued:
            logger.warning("rescued job %s (%s): %s", row.id, row.kind, reason)
            event = self._event(reason, row)
            await self._follow_ups(event)
            self.emit(event)
        await self.db.run(leases_sql.lease_delete_orphans(staleness_seconds=self.staleness))
        return rescued

    def _event(self, reason: str, row: JobSnapshot) -> Event:
        """The one event of one committed rescue (decision 035): the job retries
        (`Rescued`) or it ended `failed` on its last attempt (`Exhausted`, never both)."""
        if row.state != JobState.FAILED:
            return Rescued(job=row, reason=reason)
        return Exhausted(
            job=row,
            error=row.errors[-1]["error"] if row.errors else reason,
            attempt=row.attempt,
            dead_lettered=dead_lettered(row.queue, self.dead_letter_queues),
            reason=reason,
        )

    async def _follow_ups(self, event: Event) -> None:
        """Best-effort, after the rescue committed (decision 015): a rescue is a batch of
        the leader's, and one job's failing builder must not hold the others running."""
        try:
            inserts = follow_ups.insert([event])
            if inserts is not None:
                await self.db.run(inserts)
        except Exception:
            logger.exception("follow-up jobs of rescued job %s were not enqueued", event.job.id)

    async def _stale_heartbeats(self) -> list[JobSnapshot]:
        return await self.db.run(
            maintenance_sql.job_rescue_stale_heartbeat(
                limit=BATCH,
                staleness_seconds=self.staleness,
                message="heartbeat stale: worker presumed dead",
                dead_letter_queues=self.dead_letter_queues,
            )
        )

    async def _passed_deadlines(self) -> list[JobSnapshot]:
        return await self.db.run(
            maintenance_sql.job_rescue_deadline(
                limit=BATCH,
                message="hard deadline exceeded",
                dead_letter_queues=self.dead_letter_queues,
            )
        )

    async def _expired_callbacks(self) -> list[JobSnapshot]:
        return await self.db.run(
            maintenance_sql.job_rescue_expired_callback(
                limit=BATCH,
                message="callback timed out",
                dead_letter_queues=self.dead_letter_queues,
            )
        )
