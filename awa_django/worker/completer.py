"""Batches `Completed` outcomes into one guarded statement (DESIGN §4 completer).

Completions queue up while a flush is in flight, so the batch grows with the load without
a timer. RETURNING tells each attempt whether its completion applied or was stale. A
batch the database refuses is retried row by row, so one value it cannot store fails only
its own attempt (`OutcomeNotStored`), never its neighbours (DESIGN §5, per-job isolation).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import psycopg

from awa_django.exceptions import OutcomeNotStored
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.database import Database, retry_transient
from awa_django.worker.metrics import WorkerMetrics

logger = logging.getLogger("awa_django.worker")

BATCH_SIZE = 512

Pending = tuple[JobSnapshot, str | None, "asyncio.Future[JobSnapshot | None]"]


class Completer:
    def __init__(
        self, db: Database, forced: Callable[[], bool], metrics: WorkerMetrics | None = None
    ) -> None:
        self.db = db
        self.forced = forced
        self.metrics = metrics or WorkerMetrics.disabled()
        self._pending: list[Pending] = []
        self._wake = asyncio.Event()

    async def complete(self, row: JobSnapshot, result_json: str | None) -> JobSnapshot | None:
        """Queue one completion; resolves to the committed row, or None when stale."""
        future: asyncio.Future[JobSnapshot | None] = asyncio.get_running_loop().create_future()
        self._pending.append((row, result_json, future))
        self._wake.set()
        return await future

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0)  # let completions finishing in this tick join the batch
            while self._pending:
                try:
                    await self.run_once()
                except Exception:
                    # The batch's attempts were told (their futures carry the error); their
                    # jobs stay running without heartbeats, so rescue re-runs them.
                    logger.exception("completion flush failed")
                    await asyncio.sleep(1.0)

    async def run_once(self) -> int:
        """Flush up to BATCH_SIZE queued completions in one statement."""
        batch, self._pending = self._pending[:BATCH_SIZE], self._pending[BATCH_SIZE:]
        if not batch:
            return 0
        batch.sort(key=lambda item: item[0].id)  # one lock order for every writer
        return await self._complete(batch)

    async def _complete(self, batch: list[Pending]) -> int:
        try:
            applied = await self._flush(batch)
        except psycopg.Error as exc:  # not an outage: retry_transient waits those out
            if len(batch) == 1:
                _settle(batch, error=OutcomeNotStored(str(exc).strip()))
                return 0
            logger.warning("a completion batch was refused (%s); retrying row by row", exc)
            return sum([await self._complete([item]) for item in batch])
        except Exception as exc:
            _settle(batch, error=exc)
            raise
        _settle(batch, applied=applied)
        return len(applied)

    async def _flush(self, batch: list[Pending]) -> dict[int, JobSnapshot]:
        query = jobs_sql.job_complete_many(
            ids=[row.id for row, _, _ in batch],
            leases=[row.run_lease for row, _, _ in batch],
            results=[result for _, result, _ in batch],
        )
        began = time.monotonic()
        rows = await retry_transient(
            lambda: self.db.run(query), f"completing {len(batch)} jobs", self.forced
        )
        self.metrics.flushed(len(batch), time.monotonic() - began)
        return {row.id: row for row in rows or ()}

    def pending(self) -> int:
        """Completions queued and not yet taken by a flush."""
        return len(self._pending)


def _settle(
    batch: list[Pending],
    applied: dict[int, JobSnapshot] | None = None,
    error: BaseException | None = None,
) -> None:
    """Tell each attempt of `batch` its committed row (None: stale), or the error."""
    for row, _, future in batch:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result((applied or {}).get(row.id))
