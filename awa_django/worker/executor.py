"""Schedules attempts in the worker: the event loop, the thread pool and the batched
completer around the one attempt lifecycle of `execution.attempt` (DESIGN §4 executor).

`async def` handlers run on the loop; plain `def` handlers run in a bounded thread pool
with Django's connection hygiene around each job. The worker slot is released as soon as
the handler returns; the outcome is written after, and hooks run detached after that.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from django.db import close_old_connections

from awa_django import tracing
from awa_django.events import Event
from awa_django.exceptions import StaleAttempt, UnknownJobKind
from awa_django.execution import atomic, attempt
from awa_django.execution.context import JobContext
from awa_django.execution.outcomes import Transition
from awa_django.registry import registry
from awa_django.results import CallbackToken
from awa_django.snapshot import JobSnapshot
from awa_django.storage.refusals import refusal
from awa_django.storage.sql import Statement
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.completer import Completer
from awa_django.worker.database import Database, retry_transient
from awa_django.worker.hook_queue import HookQueue
from awa_django.worker.inflight import InFlight
from awa_django.worker.metrics import WorkerMetrics

CALLBACK_POLL_SECONDS = 0.2
T = TypeVar("T")


class Executor:
    """Runs attempts and is the `AttemptHost` their `JobContext`s call back into."""

    def __init__(
        self,
        db: Database,
        completer: Completer,
        inflight: InFlight,
        threads: ThreadPoolExecutor,
        hook_queue: HookQueue,
        max_result_bytes: int,
        forced: Callable[[], bool],
        unknown_kind_grace: float = 0.0,
        metrics: WorkerMetrics | None = None,
        refuse_kind: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self.db = db
        # Told the kinds this process cannot load a handler for (HandledKinds.refuse).
        self.refuse_kind = refuse_kind
        self.hook_queue = hook_queue
        self.completer = completer
        self.inflight = inflight
        self.threads = threads
        self.max_result_bytes = max_result_bytes
        self.unknown_kind_grace = unknown_kind_grace
        self.forced = forced
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.completed_count = 0
        self.metrics = metrics or WorkerMetrics.disabled()

    async def execute(self, row: JobSnapshot, release: Callable[[], None]) -> None:
        """Run the attempt claimed as `row`; call `release()` once the handler returned."""
        if self.loop is None:
            self.loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        job: JobContext[Any] = JobContext(row, None, host=self)
        self.inflight.add(job)
        try:
            self.emit(attempt.started(job))
            started = time.monotonic()
            try:
                with tracing.attempt_span(
                    row.kind, row.queue, row.id, row.attempt, row.metadata
                ) as span:
                    transition = await self._run_handler(job, span)
                    if span is not None:
                        tracing.mark_outcome(span, *_outcome_of(transition))
            finally:
                self.inflight.ending(job)
                release()
            seconds = time.monotonic() - started
            # One turn of the loop before the outcome: the dispatcher's next claim for the
            # freed slot goes out first, so its round trip overlaps with this write
            # (measured: +2.5 % on a drain of short jobs).
            await asyncio.sleep(0)
            self.metrics.attempt(row.kind, row.queue, seconds, _wait_seconds(row))
            if isinstance(transition, atomic.Committed):
                events = transition.events
            else:
                steps = attempt.finish(job, transition, seconds, self.max_result_bytes)
                events = await attempt.adrive(steps, self._execute_step)
            for event in events:
                self.emit(event)
        finally:
            self.inflight.remove(job)

    def runs_on_loop(self, row: JobSnapshot) -> bool:
        """Whether the attempt of `row` runs its handler on the event loop (a declared
        `async def`, which is never atomic); the dispatcher starts those within the claim.
        Kinds only a resolver knows (django.tasks import paths) say no: answering would
        import their module here, once more than the attempt does."""
        definition = registry.declared(row.kind)
        return definition is not None and definition.is_async

    async def _run_handler(
        self, job: JobContext[Any], span: Any = None
    ) -> Transition | atomic.Committed | None:
        try:
            definition = attempt.load_handler(job)
            if attempt.runs_atomic(definition, job):
                # Its outcome commits inside the handler's transaction, at any moment.
                self.inflight.ending(job)
                # Handler and outcome on the thread's own Django connection, in one
                # transaction (decision 015); the loop waits without blocking.
                return await asyncio.get_running_loop().run_in_executor(
                    self.threads, self._run_atomic, definition.handler, job
                )
            if definition.is_async:
                result = await definition.handler(job)
            else:
                loop = asyncio.get_running_loop()
                # Under a span, the thread runs in a copy of this context, so the handler's
                # own spans nest under the attempt's.
                run: Callable[..., Any] = contextvars.copy_context().run if span else _call
                result = await loop.run_in_executor(
                    self.threads, run, _run_sync, definition.handler, job
                )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit from a handler must not end the worker
            if isinstance(exc, UnknownJobKind):
                self.refuse_kind(job.kind)
            return attempt.outcome_of_error(job, exc, self.unknown_kind_grace)
        return attempt.outcome_of_result(job, result)

    def _run_atomic(
        self, handler: Callable[[JobContext[Any]], Any], job: JobContext[Any]
    ) -> Transition | atomic.Committed | None:
        close_old_connections()
        try:
            return atomic.run(job, handler, self.db.alias, self.max_result_bytes)
        finally:
            close_old_connections()

    async def _execute_step(self, step: attempt.Step) -> Any:
        if isinstance(step, attempt.Outcome):
            return await self._retrying(
                lambda: self.db.run_in_transaction(lambda conn: _write_outcome(conn, step)),
                step.query.statement,
            )
        if isinstance(step, attempt.Completion):
            applied = await self.completer.complete(step.row, step.result_json)
            if applied is not None:
                self.completed_count += 1
            return applied
        return await self._retrying(lambda: self.db.run(step), step.statement)

    async def _retrying(self, write: Callable[[], Awaitable[T]], statement: Statement) -> T | None:
        # A database outage is waited out; a forced shutdown gives up (None: the outcome
        # is then treated as stale, and rescue runs the attempt again).
        try:
            return await retry_transient(write, f"running {statement} for an attempt", self.forced)
        except (psycopg.Error, UnicodeError) as exc:  # not an outage: waited out above
            raise refusal(exc) from exc

    def emit(self, event: Event) -> None:
        """Count a committed event and hand it to the hook queue: hooks never hold a slot,
        block claiming or completion, or delay shutdown."""
        self.metrics.event(event)
        self.hook_queue.put(event)

    # -- AttemptHost: what a running handler can ask of the runtime ----------------------
    async def aregister_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken:
        return await attempt.adrive(attempt.register_callback(job, timeout), self._execute_step)

    async def aflush_progress(self, job: JobContext[Any]) -> None:
        await attempt.adrive(attempt.flush_progress(job), self._execute_step)

    async def await_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any:
        """Keep the slot and poll (a plain read) until resume_external hands a payload."""
        entered = await self.db.run(
            jobs_sql.job_enter_wait(id=job.id, run_lease=job.run_lease, callback_id=token.id)
        )
        while True:
            state = await self.db.run(jobs_sql.job_wait_state(id=job.id))
            if state is None or state[1] != job.run_lease:
                raise StaleAttempt(f"job {job.id} was rescued or re-claimed while waiting")
            current, _, has_payload = state
            if current == "running" and has_payload:
                return await self._take_callback_result(job)
            if current == "cancelled":
                raise StaleAttempt(f"job {job.id} was cancelled while waiting for its callback")
            if current != "waiting_external" or not entered:
                # Not waiting (timed out) or never entered the wait: this token is not the
                # job's current callback, so no resume can ever come.
                raise StaleAttempt(f"job {job.id} is not waiting for callback {token.id}")
            if job.is_cancelled():
                raise StaleAttempt(f"job {job.id} was cancelled while waiting for its callback")
            await asyncio.sleep(CALLBACK_POLL_SECONDS)

    async def _take_callback_result(self, job: JobContext[Any]) -> Any:
        taken = await self.db.run(
            jobs_sql.job_take_callback_result(id=job.id, run_lease=job.run_lease)
        )
        if taken is None:
            raise StaleAttempt(f"job {job.id} lost its callback result to another attempt")
        return json.loads(taken[0])

    def register_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken:
        return self._from_thread(self.aregister_callback(job, timeout))

    def wait_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any:
        return self._from_thread(self.await_for_callback(job, token))

    def flush_progress(self, job: JobContext[Any]) -> None:
        self._from_thread(self.aflush_progress(job))

    def _from_thread(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self.loop
        assert loop is not None
        if threading.get_ident() == self._loop_thread:
            coro.close()
            raise RuntimeError(attempt.BLOCKING_FROM_ASYNC)
        return asyncio.run_coroutine_threadsafe(coro, loop).result()


async def _write_outcome(conn: psycopg.AsyncConnection[Any], step: attempt.Outcome) -> Any:
    """The transition, then its follow-up jobs, on one connection in one transaction."""
    row = await step.query.arun(conn)
    if row is not None and (inserts := step.follow_ups(row)) is not None:
        await inserts.arun(conn)
    return row


def _run_sync(handler: Callable[[JobContext[Any]], Any], job: JobContext[Any]) -> Any:
    # Django's request cycle closes stale connections before and after each request; a job
    # in a long-lived worker thread gets the same hygiene.
    close_old_connections()
    try:
        return handler(job)
    finally:
        close_old_connections()


def _call(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)


def _outcome_of(
    transition: Transition | atomic.Committed | None,
) -> tuple[str | None, str | None]:
    """(state, error) an attempt's span records; (None, None) for a plain completion. An
    atomic attempt already committed: its first event's row says how it ended."""
    if isinstance(transition, atomic.Committed):
        if not transition.events:
            return None, None
        return str(transition.events[0].job.state), None
    if transition is None:
        return None, None
    return str(transition.state), transition.error


def _wait_seconds(row: JobSnapshot) -> float | None:
    """created_at → this claim (awa.job.wait_duration)."""
    if row.attempted_at is None:
        return None
    return (row.attempted_at - row.created_at).total_seconds()
