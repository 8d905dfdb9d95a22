"""Runs one attempt: decode args, call the handler, map the result, write the outcome,
then dispatch its event after commit (DESIGN §4 executor, §5, §7).

`async def` handlers run on the loop; plain `def` handlers run in a bounded thread pool
with Django's connection hygiene around each job. The worker slot is released as soon as
the handler returns; the outcome is written after, and hooks run detached after that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from django.db import close_old_connections

from awa_django.codec import decode_args, dumps
from awa_django.events import Completed, Event, Started
from awa_django.exceptions import AwaError, StaleAttempt, UnknownJobKind
from awa_django.execution.context import JobContext
from awa_django.execution.outcomes import (
    Transition,
    after_refused_park,
    event_for,
    plan,
    plan_failure,
)
from awa_django.registry import JobDefinition, registry
from awa_django.results import CallbackToken
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.completer import Completer
from awa_django.worker.database import Database, retry_transient
from awa_django.worker.hook_queue import HookQueue
from awa_django.worker.inflight import InFlight

logger = logging.getLogger("awa_django.worker")

CALLBACK_POLL_SECONDS = 0.2


class Executor:
    """Runs attempts and is the `AttemptHost` their `JobContext` contexts call back into."""

    def __init__(
        self,
        db: Database,
        completer: Completer,
        inflight: InFlight,
        threads: ThreadPoolExecutor,
        hook_queue: HookQueue,
        max_result_bytes: int,
        forced: Callable[[], bool],
    ) -> None:
        self.db = db
        self.hook_queue = hook_queue
        self.completer = completer
        self.inflight = inflight
        self.threads = threads
        self.max_result_bytes = max_result_bytes
        self.forced = forced
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.completed_count = 0

    async def execute(self, row: JobSnapshot, release: Callable[[], None]) -> None:
        """Run the attempt claimed as `row`; call `release()` once the handler returned."""
        if self.loop is None:
            self.loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        job: JobContext[Any] = JobContext(row, None, host=self)
        self.inflight.add(job)
        try:
            self.emit(Started(job=row))
            started = time.monotonic()
            try:
                transition = await self._run_handler(job)
            finally:
                release()
            await self._finish(job, transition, time.monotonic() - started)
        finally:
            self.inflight.remove(job)

    async def _run_handler(self, job: JobContext[Any]) -> Transition | None:
        try:
            definition = load_handler(job)
            if definition.is_async:
                result = await definition.handler(job)
            else:
                result = await self.loop.run_in_executor(  # type: ignore[union-attr]
                    self.threads, _run_sync, definition.handler, job
                )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit from a handler must not end the worker
            logger.info("job %s (%s) attempt %s raised %r", job.id, job.kind, job.attempt, exc)
            return plan_failure(job.row, exc)
        return plan(job.row, result)

    async def _finish(
        self, job: JobContext[Any], transition: Transition | None, seconds: float
    ) -> None:
        if transition is None:
            transition = await self._complete(job, seconds)
        if transition is not None:
            await self._transition(job, transition)

    async def _complete(self, job: JobContext[Any], seconds: float) -> Transition | None:
        """Hand the completion to the completer; a result that cannot be stored fails the
        job instead (returned as the transition to write)."""
        try:
            result_json = result_as_json(job, self.max_result_bytes)
        except AwaError as exc:
            return plan_failure(job.row, exc)
        applied = await self.completer.complete(job.row, result_json)
        if applied is None:
            self._stale(job)
        else:
            self.completed_count += 1
            self.emit(Completed(job=applied, duration=timedelta(seconds=seconds)))
        return None

    async def _transition(self, job: JobContext[Any], transition: Transition) -> None:
        params = transition.params(job.row, job.progress_json())
        rows = await retry_transient(
            lambda: self.db.jobs(jobs_sql.job_set_state_if_running, params),
            f"writing the outcome of job {job.id}",
            self.forced,
        )
        if not rows:
            if rows is not None and transition.callback_id is not None:
                return await self._park_refused(job)
            return self._stale(job)
        row = rows[0]
        if transition.event is not None:
            self.emit(event_for(transition, row))

    async def _park_refused(self, job: JobContext[Any]) -> None:
        current = await self.db.jobs(jobs_sql.job_get, {"id": job.id})
        violation = after_refused_park(job.row, current[0] if current else None)
        if violation is None:
            self._stale(job)
        else:
            await self._transition(job, violation)

    def _stale(self, job: JobContext[Any]) -> None:
        logger.info(
            "outcome of job %s (run_lease %s) is stale: it was rescued, cancelled or "
            "resolved meanwhile; ignored",
            job.id,
            job.run_lease,
        )

    # -- events ---------------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        """Hand a committed event to the hook queue: hooks never hold a slot, block
        claiming or completion, or delay shutdown."""
        self.hook_queue.put(event)

    # -- AttemptHost: what a running handler can ask of the runtime ----------------------
    async def aregister_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken:
        _check_timeout(timeout)
        params = {
            "id": job.id,
            "run_lease": job.run_lease,
            "callback_id": uuid.uuid4(),
            "timeout_seconds": float(timeout),
        }
        rows = await self.db.rows(jobs_sql.job_register_callback, params)
        if not rows:
            raise StaleAttempt(f"job {job.id} is no longer running under this attempt")
        return CallbackToken(id=rows[0][0], timeout_at=rows[0][1])

    async def await_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any:
        params = {"id": job.id, "run_lease": job.run_lease, "callback_id": token.id}
        entered = await self.db.rows(jobs_sql.job_enter_wait, params)
        while True:
            state = await self.db.rows(jobs_sql.job_wait_state, {"id": job.id})
            if not state or state[0][1] != job.run_lease:
                raise StaleAttempt(f"job {job.id} was rescued or re-claimed while waiting")
            current, _, has_payload = state[0]
            if current == "running" and has_payload:
                return await self._take_callback_result(job)
            if current != "waiting_external" or not entered:
                # Not waiting (cancelled, timed out) or never entered the wait: this token
                # is not the job's current callback, so no resume can ever come.
                raise StaleAttempt(f"job {job.id} is not waiting for callback {token.id}")
            if job.is_cancelled():
                raise StaleAttempt(f"job {job.id} cancelled while waiting for callback")
            await asyncio.sleep(CALLBACK_POLL_SECONDS)

    async def _take_callback_result(self, job: JobContext[Any]) -> Any:
        rows = await self.db.rows(
            jobs_sql.job_take_callback_result, {"id": job.id, "run_lease": job.run_lease}
        )
        if not rows:
            raise StaleAttempt(f"job {job.id} lost its callback result to another attempt")
        return json.loads(rows[0][0])

    def register_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken:
        return self._from_thread(self.aregister_callback(job, timeout))

    def wait_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any:
        return self._from_thread(self.await_for_callback(job, token))

    def flush_progress(self, job: JobContext[Any]) -> None:
        self._from_thread(self.aflush_progress(job))

    async def aflush_progress(self, job: JobContext[Any]) -> None:
        if job.take_progress() is not None:
            params = {"id": job.id, "run_lease": job.run_lease, "progress": job.progress_json()}
            await self.db.rows(jobs_sql.job_progress_flush, params)

    def _from_thread(self, coro: Coroutine[Any, Any, Any]) -> Any:
        loop = self.loop
        assert loop is not None
        if threading.get_ident() == self._loop_thread:
            coro.close()
            raise RuntimeError(
                "called a blocking JobContext method from an async handler; use its async twin "
                "(`await job.aregister_callback()`, `await job.await_for_callback()`, "
                "`await job.aflush_progress()`)"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()


def result_as_json(job: JobContext[Any], limit: int) -> str | None:
    """`job.result` as JSON for the `result` column (None when the handler set none)."""
    if job.result is None:
        return None
    return dumps(job.result, what=f"result of job {job.id}", limit=limit)


def load_handler(job: JobContext[Any]) -> JobDefinition:
    """The handler for `job`'s kind, with `job.args` decoded into its args type.
    Raises UnknownJobKind / InvalidJobArgs, which fail the job terminally."""
    definition = registry.job(job.kind)
    if definition is None:
        raise UnknownJobKind(f"unknown job kind: {job.kind}")
    job.args = decode_args(definition.args_type, job.row.args)
    return definition


def _run_sync(handler: Callable[[JobContext[Any]], Any], job: JobContext[Any]) -> Any:
    # Django's request cycle closes stale connections before and after each request; a job
    # in a long-lived worker thread gets the same hygiene.
    close_old_connections()
    try:
        return handler(job)
    finally:
        close_old_connections()


def _check_timeout(timeout: float) -> None:
    if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout < 0:
        raise ValueError(
            f"callback timeout must be a finite number of seconds >= 0, got {timeout!r}"
        )
