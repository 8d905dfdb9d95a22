"""Schedules attempts inline, in the calling thread, on Django's connection.

For tests and scripts (`awa_django.testing.drain()` uses it): the second scheduler of the
one attempt lifecycle in `attempt.py`, so it writes exactly what the worker writes and
dispatches the same events once they commit. Callbacks can be registered; waiting for one
in place is not supported (nothing could resolve it while the caller is blocked).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction
from psycopg.pq import TransactionStatus

from awa_django.conf import awa_settings
from awa_django.events import Cancelled, Event
from awa_django.exceptions import AwaError
from awa_django.execution import announcements, atomic, attempt, follow_ups
from awa_django.execution.context import JobContext
from awa_django.execution.outcomes import Transition
from awa_django.registry import dispatch as hooks
from awa_django.results import CallbackToken
from awa_django.storage.models import Job
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql import workflows as workflows_sql

logger = logging.getLogger("awa_django.worker")

WORKER_ID = "inline"
CLAIM_BATCH = 100


def run_available(
    queue: str | None = None, *, using: str | None = None, limit: int | None = None
) -> int:
    """Claim and run available jobs (of `queue`, or of every queue) until none is left or
    `limit` attempts ran; returns how many attempts ran. Jobs that become available while
    it runs (a retry whose backoff passed is *not* one: it waits for promotion) are run too.
    `using` defaults to `AWA["DATABASE"]`, like the Client's."""
    settings = awa_settings()
    runner = InlineRunner(using or settings.database)
    ran = 0
    while limit is None or ran < limit:
        queues = [queue] if queue else _queues_with_work(runner.using)
        claimed = 0
        for name in queues:
            batch = CLAIM_BATCH if limit is None else min(CLAIM_BATCH, limit - ran)
            config = settings.queue(name)
            # As the worker claims (no heartbeat comes here: each attempt ends in the call).
            lease_now = attempt.lease_at_claim(config, settings.heartbeat_interval)
            claim = attempt.claim(config, batch, WORKER_ID, lease_now=lease_now)
            for row in claim.run(runner.using):
                runner.run(JobContext(row, None, host=runner))
                claimed += 1
                ran += 1
        if not claimed:
            return ran
        # The children these attempts' failures cancelled, after the attempts' own events.
        announce_owed(using=runner.using)
    return ran


def promote_due(*, using: str | None = None, batch: int = 1000) -> int:
    """Make every due scheduled/retryable job available now, as the leader would; returns
    how many. (Inside a test transaction `now()` is the transaction's start.)"""
    using = using or awa_settings().database
    total = 0
    while True:
        promoted = maintenance_sql.job_promote_due(limit=batch).run(using)
        total += promoted
        if promoted < batch:
            return total


def announce_owed(*, using: str | None = None, batch: int = 1000) -> int:
    """Announce the events the fan-in trigger owes (decision 046), as the leader's
    announcer does: claim the outbox rows and insert their follow-ups in one transaction
    (a savepoint inside the caller's), dispatch each event once it commits. Returns how
    many events."""
    using = using or awa_settings().database
    total = 0
    while True:
        # A transaction only when follow-ups may join the claim (in autocommit, the claim
        # alone is one statement); no savepoint of its own: a failed claim fails the
        # caller's transaction, as any failed statement would.
        wanted = announcements.builders_wanted()
        with transaction.atomic(using=using, savepoint=False) if wanted else nullcontext():
            rows = workflows_sql.event_outbox_claim(limit=batch).run(using)
            events = announcements.events_of(rows)
            for event in events:
                if follow_ups.wanted(Cancelled, event.job.kind):
                    _follow_ups(event, using)
            for event in events:
                transaction.on_commit(_dispatcher(event), using=using, robust=True)
        total += len(events)
        if len(rows) < batch:
            return total


def _follow_ups(event: Event, using: str) -> None:
    """As the announcer: a failing builder loses this job's follow-ups, logged."""
    try:
        with transaction.atomic(using=using):
            follow_ups.enqueue_for([event], using)
    except Exception:
        logger.exception("follow-up jobs of cancelled job %s were not enqueued", event.job.id)


def _queues_with_work(using: str) -> list[str]:
    return list(
        Job.objects.using(using)
        .filter(state="available")
        .order_by()
        .values_list("queue", flat=True)
        .distinct()
    )


class InlineRunner:
    """Runs one claimed attempt at a time in the caller's thread; the inline `AttemptHost`."""

    def __init__(self, using: str) -> None:
        self.using = using
        self.max_result_bytes = awa_settings().max_result_bytes

    def run(self, job: JobContext[Any]) -> None:
        self._emit([attempt.started(job)])
        started = time.monotonic()
        transition = self._run_handler(job)
        if isinstance(transition, atomic.Committed):
            self._emit(transition.events)
            return
        steps = attempt.finish(job, transition, time.monotonic() - started, self.max_result_bytes)
        self._emit(attempt.drive(steps, self._execute_step))

    def _run_handler(self, job: JobContext[Any]) -> Transition | atomic.Committed | None:
        try:
            definition = attempt.load_handler(job)
            if attempt.runs_atomic(definition, job):
                return atomic.run(job, definition.handler, self.using, self.max_result_bytes)
            result = self._call(definition.handler, job)
        except (Exception, SystemExit) as exc:
            # SystemExit fails the job, as in the worker. A KeyboardInterrupt is left to
            # propagate: here it is the caller's Ctrl-C, landing in the handler's frame.
            return attempt.outcome_of_error(job, exc)
        return attempt.outcome_of_result(job, result)

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
                # Not asyncio.run(): under async_to_sync, the handler's sync_to_async calls
                # (the async JobContext twins below, `aget()` & co.) run back in this thread,
                # on this thread's connection and transaction.
                result = async_to_sync(_awaited)(result)
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

    def _execute_step(self, step: attempt.Step) -> Any:
        return atomic.execute_step(self.using, step)

    def _emit(self, events: list[Event]) -> None:
        """Dispatch once the caller's outermost transaction commits (at once in autocommit).
        `robust`: the transition has committed by then, so a failing hook is logged, never
        raised into the caller."""
        for event in events:
            transaction.on_commit(_dispatcher(event), using=self.using, robust=True)

    # -- AttemptHost ------------------------------------------------------------------------
    def register_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken:
        _refuse_inside_a_loop()
        return attempt.drive(attempt.register_callback(job, timeout), self._execute_step)

    def wait_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any:
        _refuse_inside_a_loop()
        raise AwaError("wait_for_callback() cannot wait inline; run a worker for this job")

    async def aregister_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken:
        return await sync_to_async(self.register_callback)(job, timeout)

    async def await_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any:
        return self.wait_for_callback(job, token)

    def flush_progress(self, job: JobContext[Any]) -> None:
        _refuse_inside_a_loop()
        attempt.drive(attempt.flush_progress(job), self._execute_step)

    async def aflush_progress(self, job: JobContext[Any]) -> None:
        await sync_to_async(self.flush_progress)(job)


def _refuse_inside_a_loop() -> None:
    """An async handler called a blocking JobContext method: the worker's clear error."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(attempt.BLOCKING_FROM_ASYNC)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _dispatcher(event: Event) -> Callable[[], None]:
    return lambda: hooks.dispatch(event)


def _transaction_broken(using: str) -> bool:
    wrapper = connections[using]
    if wrapper.needs_rollback:
        return True
    raw = wrapper.connection
    return raw is not None and raw.info.transaction_status == TransactionStatus.INERROR
