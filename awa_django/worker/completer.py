"""Batches `Completed` outcomes into one guarded statement (DESIGN §4 completer).

Completions queue up while a flush is in flight, so the batch grows with the load without
a timer. RETURNING tells each attempt whether its completion applied or was stale: with the
whole committed row when a hook will read it, otherwise with the finalization time only
(the row is then the claimed one with the completion's changes, for the counters). A batch
the database refuses is retried row by row, so one refused row answers only its own
attempt (`OutcomeNotStored` or `OutcomeRefused`, storage/refusals.py), never its
neighbours (DESIGN §5, per-job isolation).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import operator
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

from awa_django.events import Completed
from awa_django.registry import registry
from awa_django.snapshot import COLUMNS, JobSnapshot, assemble
from awa_django.states import JobState
from awa_django.storage.query import Query
from awa_django.storage.refusals import refusal
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.database import Database, retry_transient
from awa_django.worker.metrics import WorkerMetrics

logger = logging.getLogger("awa_django.worker")

BATCH_SIZE = 512
T = TypeVar("T")

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
        except (psycopg.Error, UnicodeError) as exc:  # not an outage: retry_transient waits
            if len(batch) == 1:  # those out
                _settle(batch, error=refusal(exc))
                return 0
            logger.warning("a completion batch was refused (%s); retrying row by row", exc)
            return sum([await self._complete([item]) for item in batch])
        except Exception as exc:
            _settle(batch, error=exc)
            raise
        _settle(batch, applied=applied)
        return len(applied)

    async def _flush(self, batch: list[Pending]) -> dict[int, JobSnapshot]:
        ids = [row.id for row, _, _ in batch]
        leases = [row.run_lease for row, _, _ in batch]
        results = [result for _, result, _ in batch]
        began = time.monotonic()
        if any(registry.wants(row.kind, Completed) for row, _, _ in batch):
            query = jobs_sql.job_complete_many(ids=ids, leases=leases, results=results)
            rows = await self._run(query, batch)
            applied = {row.id: row for row in rows or ()}
        else:
            lean = jobs_sql.job_complete_many_lean(ids=ids, leases=leases, results=results)
            finalized = await self._run(lean, batch) or {}
            applied = {
                row.id: _completed(row, result, finalized[row.id])
                for row, result, _ in batch
                if row.id in finalized
            }
        self.metrics.flushed(len(batch), time.monotonic() - began)
        return applied

    async def _run(self, query: Query[T], batch: list[Pending]) -> T | None:
        return await retry_transient(
            lambda: self.db.run(query), f"completing {len(batch)} jobs", self.forced
        )

    def pending(self) -> int:
        """Completions queued and not yet taken by a flush."""
        return len(self._pending)


def _completed(row: JobSnapshot, result: str | None, finalized_at: dt.datetime) -> JobSnapshot:
    """The committed row of a completion that returned no row: what the completion wrote
    over the claimed row. No hook reads it (that is why the row was not returned); the
    counters read its kind and queue. Values a handler changed in place (its args or
    metadata dicts), or a callback it registered, would show here, not in the database."""
    values = list(_ALL_COLUMNS(row))  # dataclasses.replace took four times as long (6 us)
    values[_STATE] = str(JobState.COMPLETED)
    values[_FINALIZED_AT] = finalized_at
    values[_PROGRESS] = None
    values[_RESULT] = None if result is None else json.loads(result)
    return assemble(*values)


_ALL_COLUMNS = operator.attrgetter(*COLUMNS)
_STATE, _FINALIZED_AT, _PROGRESS, _RESULT = (
    COLUMNS.index(name) for name in ("state", "finalized_at", "progress", "result")
)


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
