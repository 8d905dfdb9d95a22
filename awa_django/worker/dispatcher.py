"""Claims jobs for one queue, as many as it has free slots, in one statement (DESIGN §4).

It wakes on a NOTIFY for its queue, on a freed slot while the queue may hold more work,
and on the poll timer (NOTIFY is only a hint; the timer alone keeps it correct).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from awa_django.conf import QueueConfig
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Backoff, Database
from awa_django.worker.metrics import WorkerMetrics

logger = logging.getLogger("awa_django.worker")


class Dispatcher:
    def __init__(
        self,
        queue: QueueConfig,
        db: Database,
        execute: Callable[[JobSnapshot, Callable[[], None]], Awaitable[None]],
        worker_id: str,
        poll_interval: float,
        may_claim: Callable[[], bool] = lambda: True,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self.queue = queue
        self.db = db
        self.execute = execute
        self.worker_id = worker_id
        self.poll_interval = poll_interval
        # False while the runtime holds claims back (a full hook backlog under "pause").
        self.may_claim = may_claim
        self.metrics = metrics or WorkerMetrics.disabled()
        self.running = 0
        self.stopping = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._maybe_more = True

    @property
    def free_slots(self) -> int:
        return self.queue.concurrency - self.running

    def wake(self) -> None:
        self._wake.set()

    async def run_once(self) -> int:
        """Reserve the free slots, then claim up to that many jobs; start each one."""
        free = self.free_slots
        if free <= 0 or self.stopping:
            return 0
        if not self.may_claim():
            self._maybe_more = False  # wait for the poll timer, do not spin
            return 0
        self.running += free  # reserve first: a slot is never promised twice
        began = time.monotonic()
        try:
            rows = await self.db.run(
                jobs_sql.job_claim_many(
                    queue=self.queue.name,
                    limit=free,
                    worker_id=self.worker_id,
                    deadline_seconds=self.queue.deadline,
                )
            )
        finally:
            self.running -= free
        self.metrics.claimed(self.queue.name, len(rows), time.monotonic() - began)
        self._maybe_more = len(rows) == free
        for row in rows:
            self.running += 1
            task = asyncio.create_task(self._execute(row))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return len(rows)

    async def _execute(self, row: JobSnapshot) -> None:
        try:
            await self.execute(row, self._release)
        except Exception:
            # The attempt stays `running` without heartbeats: rescue picks it up later.
            logger.exception("job %s (%s): executor failed", row.id, row.kind)

    def _release(self) -> None:
        self.running -= 1
        if self._maybe_more:
            self._wake.set()

    async def run(self) -> None:
        backoff = Backoff()
        while not self.stopping:
            try:
                await self.run_once()
                backoff.reset()
            except Exception as exc:
                if not isinstance(exc, TRANSIENT_ERRORS):
                    logger.exception("claiming from %r failed unexpectedly", self.queue.name)
                delay = backoff.next_delay()
                logger.warning(
                    "claiming from %r failed (%s); retrying in %.1fs", self.queue.name, exc, delay
                )
                await asyncio.sleep(delay)
                continue
            if self._maybe_more and self.free_slots > 0:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
            self._wake.clear()

    async def stop(self) -> None:
        """Stop claiming; in-flight attempts go on (the runtime waits for `tasks`)."""
        self.stopping = True
        self._wake.set()
