"""Runs available jobs inline, in the calling thread, on Django's connection.

For tests and scripts (`awa_django.testing.drain()` uses it): the same claim, the same
guarded outcome statements and the same post-commit events as the worker, without a
worker process. Callbacks can be registered; waiting for one in place is not supported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import connections, transaction
from psycopg.pq import TransactionStatus

from awa_django.codec import dumps
from awa_django.conf import awa_settings
from awa_django.events import Completed, Event, Started
from awa_django.exceptions import AwaError, StaleAttempt
from awa_django.execution.context import JobContext
from awa_django.execution.outcomes import (
    Transition,
    after_refused_park,
    event_for,
    plan,
    plan_failure,
)
from awa_django.registry import dispatch as hooks
from awa_django.results import CallbackToken
from awa_django.storage import connection as storage
from awa_django.storage.models import Job as JobModel
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.worker.executor import load_handler, result_as_json

logger = logging.getLogger("awa_django.worker")

WORKER_ID = "inline"
CLAIM_BATCH = 100


def run_available(
    queue: str | None = None, *, using: str = "default", limit: int | None = None
) -> int:
    """Claim and run available jobs (of `queue`, or of every queue) until none is left or
    `limit` attempts ran; returns how many attempts ran. Jobs that become available while
    it runs (a retry whose backoff passed is *not* one: it waits for promotion) are run too."""
    runner = _InlineRunner(using)
    ran = 0
    while limit is None or ran < limit:
        queues = [queue] if queue else _queues_with_work(using)
        claimed = 0
        for name in queues:
            batch = CLAIM_BATCH if limit is None else min(CLAIM_BATCH, limit - ran)
            for row in storage.fetch_jobs(
                using,
                jobs_sql.job_claim_many,
                {
                    "queue": name,
                    "limit": batch,
                    "worker_id": WORKER_ID,
                    "deadline_seconds": 0,
                },
            ):
                runner.run(JobContext(row, None, host=runner))
                claimed += 1
                ran += 1
        if not claimed:
            return ran
    return ran


def promote_due(*, using: str = "default", batch: int = 1000) -> int:
    """Make every due scheduled/retryable job available now, as the leader would; returns
    how many. (Inside a test transaction `now()` is the transaction's start.)"""
    total = 0
    while True:
        rows = storage.fetch_rows(using, maintenance_sql.job_promote_due, {"limit": batch})
        promoted = sum(row[1] for row in rows)  # one row per queue
        total += promoted
        if promoted < batch:
            return total


def _queues_with_work(using: str) -> list[str]:
    return list(
        JobModel.objects.using(using)
        .filter(state="available")
        .values_list("queue", flat=True)
        .distinct()
    )


def _transaction_broken(using: str) -> bool:
    wrapper = connections[using]
    if wrapper.needs_rollback:
        return True
    raw = wrapper.connection
    return raw is not None and raw.info.transaction_status == TransactionStatus.INERROR


class _InlineRunner:
    """Runs one claimed attempt and writes its outcome; the inline `AttemptHost`."""

    def __init__(self, using: str) -> None:
        self.using = using

    def run(self, job: JobContext[Any]) -> None:
        self._emit(Started(job=job.row))
        started = time.monotonic()
        try:
            definition = load_handler(job)
            result = self._call(definition.handler, job)
            transition = plan(job.row, result)
        except Exception as exc:
            transition = plan_failure(job.row, exc)
        if transition is None:
            transition = self._complete(job, time.monotonic() - started)
        if transition is not None:
            self._transition(job, transition)

    def _call(self, handler: Callable[[JobContext[Any]], Any], job: JobContext[Any]) -> Any:
        """Run the handler. Inside a transaction (a test's), a query that failed in the
        handler aborts it: roll back to before the handler so the outcome can be written.
        In autocommit there is no savepoint and nothing to undo, as in a worker."""
        # The wrapper's own methods: transaction.savepoint() is deprecated in Django 6.1 and
        # its replacement does not exist in 6.0.
        wrapper = connections[self.using]
        savepoint = wrapper.savepoint()
        try:
            result = handler(job)
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
        finally:
            # Also when the handler caught its own database error and returned normally.
            if savepoint is not None:
                if _transaction_broken(self.using):
                    # Rolling back to before the handler repairs the transaction; Django
                    # refuses every query, this one included, while the flag is set.
                    wrapper.needs_rollback = False
                    wrapper.savepoint_rollback(savepoint)
                else:
                    wrapper.savepoint_commit(savepoint)
        return result

    def _complete(self, job: JobContext[Any], seconds: float) -> Transition | None:
        try:
            result = result_as_json(job, awa_settings().max_result_bytes)
        except AwaError as exc:
            return plan_failure(job.row, exc)
        rows = storage.fetch_jobs(
            self.using,
            jobs_sql.job_complete_many,
            {
                "ids": [job.id],
                "leases": [job.run_lease],
                "results": [result],
            },
        )
        if rows:
            self._emit(Completed(job=rows[0], duration=timedelta(seconds=seconds)))
        return None

    def _transition(self, job: JobContext[Any], transition: Transition) -> None:
        params = transition.params(job.row, job.progress_json())
        rows = storage.fetch_jobs(self.using, jobs_sql.job_set_state_if_running, params)
        if rows and transition.event is not None:
            self._emit(event_for(transition, rows[0]))
        elif not rows and transition.callback_id is not None:
            current = storage.fetch_jobs(self.using, jobs_sql.job_get, {"id": job.id})
            violation = after_refused_park(job.row, current[0] if current else None)
            if violation is not None:
                self._transition(job, violation)

    def _emit(self, event: Event) -> None:
        transaction.on_commit(lambda: hooks.dispatch(event), using=self.using)

    # -- AttemptHost ------------------------------------------------------------------------
    def register_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken:
        import uuid

        rows = storage.fetch_rows(
            self.using,
            jobs_sql.job_register_callback,
            {
                "id": job.id,
                "run_lease": job.run_lease,
                "callback_id": uuid.uuid4(),
                "timeout_seconds": float(timeout),
            },
        )
        if not rows:
            raise StaleAttempt(f"job {job.id} is no longer running under this attempt")
        return CallbackToken(id=rows[0][0], timeout_at=rows[0][1])

    def wait_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any:
        raise AwaError("wait_for_callback() cannot wait inline; run a worker for this job")

    async def aregister_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken:
        return self.register_callback(job, timeout)

    async def await_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any:
        return self.wait_for_callback(job, token)

    def flush_progress(self, job: JobContext[Any]) -> None:
        progress = job.take_progress()
        if progress is not None:
            storage.fetch_rows(
                self.using,
                jobs_sql.job_progress_flush,
                {
                    "id": job.id,
                    "run_lease": job.run_lease,
                    "progress": dumps(progress, what="progress"),
                },
            )

    async def aflush_progress(self, job: JobContext[Any]) -> None:
        self.flush_progress(job)
