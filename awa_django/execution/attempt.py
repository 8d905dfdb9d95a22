"""One attempt of one job, written once for both schedulers (DESIGN §4, §5; STYLE §16, §17).

    claim → load the handler → run it (the scheduler's part) → plan the outcome (pure,
    `outcomes.py`) → write it guarded by run_lease → the events to dispatch after commit

Every database step of an attempt is a generator of `Step`s: it yields what it needs
written or read (a `Query`, or a `Completion` for the batch) and receives the answer. The
worker drives these generators on its event loop with its pool and batched completer
(`adrive`), the inline runner drives them synchronously on Django's connection (`drive`).
So the two differ only in how they schedule and execute, never in what they write.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.apps import apps

from awa_django.codec import decode_args, dumps
from awa_django.conf import QueueConfig, awa_settings
from awa_django.events import Completed, Event, Exhausted, Retried, Started
from awa_django.exceptions import (
    AwaError,
    FollowUpFailed,
    InvalidJobArgs,
    OutcomeNotStored,
    OutcomeRefused,
    StaleAttempt,
    UnknownJobKind,
)
from awa_django.execution import follow_ups
from awa_django.execution.context import JobContext
from awa_django.execution.outcomes import (
    Transition,
    after_refused_park,
    event_for,
    plan,
    plan_failure,
    plan_refused,
    plan_unknown_kind,
    routed,
    unstorable,
)
from awa_django.registry import JobDefinition, registry
from awa_django.results import CallbackToken
from awa_django.snapshot import JobSnapshot
from awa_django.states import JobState
from awa_django.storage.query import Query
from awa_django.storage.sql import dead_letters as dead_letters_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql.transitions import dead_lettered

logger = logging.getLogger("awa_django.worker")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Completion:
    """A plain completion: the worker batches these, the inline runner writes it alone.
    The answer is the committed row, or None when the outcome is stale."""

    row: JobSnapshot
    result_json: str | None

    def query(self) -> Query[JobSnapshot | None]:
        """This completion alone (the schedulers that do not batch it)."""
        return jobs_sql.job_complete_one(
            id=self.row.id, run_lease=self.row.run_lease, result=self.result_json
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """A guarded transition and the follow-up jobs its event asks for, written in one
    transaction (decision 015): `query` first; if it matched a row, the insert that
    `follow_ups()` plans from that row's event. The answer is the committed row, or None
    when the outcome is stale (then nothing is inserted). A builder that fails raises
    FollowUpFailed out of the step, its transaction rolled back."""

    query: Query[JobSnapshot | None]
    event: Callable[[JobSnapshot], Event]

    def follow_ups(self, row: JobSnapshot) -> Query[list[int | None]] | None:
        return follow_ups.insert([self.event(row)])


Step = Query[Any] | Completion | Outcome
Steps = Generator[Step, Any, T]
# What a step may raise that the steps themselves decide about (thrown back into them).
REFUSALS = (OutcomeNotStored, OutcomeRefused, FollowUpFailed)


# -- claim and start ----------------------------------------------------------------------
def claim(
    queue: QueueConfig, limit: int, worker_id: str, *, lease_now: bool = True
) -> Query[list[JobSnapshot]]:
    """The claim of up to `limit` jobs of `queue` for `worker_id`; with `lease_now`, it
    writes their leases (with the queue's deadline) itself (see lease_at_claim)."""
    return jobs_sql.job_claim_many(
        queue=queue.name,
        limit=limit,
        worker_id=worker_id,
        deadline_seconds=queue.deadline,
        lease_now=lease_now,
    )


def lease_at_claim(queue: QueueConfig, heartbeat_interval: float) -> bool:
    """Whether the claims of `queue` write their jobs' leases. Normally the first heartbeat
    does, within one interval of the claim (decision 030); a deadline that could pass
    before the lease is written needs it from the claim on (twice the interval: a beat
    may come late)."""
    return 0 < queue.deadline < 2 * heartbeat_interval


def started(job: JobContext[Any]) -> Started:
    """The event a committed claim announces (dispatched before the handler runs)."""
    return Started(job=job.row)


def load_handler(job: JobContext[Any]) -> JobDefinition:
    """The handler for `job`'s kind, with `job.args` decoded into its args type.
    Raises UnknownJobKind / InvalidJobArgs, which fail the job terminally."""
    definition = registry.job(job.kind)
    if definition is None:
        raise UnknownJobKind(f"unknown job kind: {job.kind}")
    job.args = decode_args(definition.args_type, job.row.args)
    return definition


def runs_atomic(definition: JobDefinition, job: JobContext[Any]) -> bool:
    """Whether this attempt runs atomically: `@job(atomic=...)`, else its queue's default
    (docs/exactly-once.md)."""
    return definition.runs_atomic(awa_settings().queue(job.queue).atomic)


# -- outcome ------------------------------------------------------------------------------
def outcome_of_result(job: JobContext[Any], result: Any) -> Transition | None:
    """What a handler that returned `result` asks for (None: a plain completion)."""
    return plan(job.row, result)


def outcome_of_error(
    job: JobContext[Any], error: BaseException, unknown_kind_grace: float = 0.0
) -> Transition:
    """What a handler that raised `error` (or could not be loaded) asks for. A kind with no
    handler here is handed back for `unknown_kind_grace` seconds (a rolling deploy)."""
    if isinstance(error, UnknownJobKind):
        logger.warning(unknown_kind_warning(job.id, job.kind))
        return plan_unknown_kind(job.row, error, unknown_kind_grace)
    return failure(job, error)


def failure(job: JobContext[Any], error: BaseException) -> Transition:
    """The failure of this attempt by `error`, logged: a retry in one INFO line, a failure
    for good at ERROR with the whole traceback (its stored error keeps only the last
    lines, and says where the rest is)."""
    transition = plan_failure(job.row, error, logged=True)
    if transition.state != JobState.FAILED:
        logger.info("job %s (%s) attempt %s raised %r", job.id, job.kind, job.attempt, error)
        return transition
    trace = None if isinstance(error, InvalidJobArgs) else error  # our own message says all
    logger.error(
        "job %s (%s) failed for good on attempt %s of %s: %s",
        job.id,
        job.kind,
        job.attempt,
        job.row.max_attempts,
        error.__class__.__name__,
        exc_info=trace,
    )
    return transition


def unknown_kind_warning(job_id: int, kind: str) -> str:
    """The worker's warning for a job whose kind it has no handler for. The usual cause is a
    newcomer's: the app declaring the job is missing from INSTALLED_APPS, so its jobs.py was
    never autodiscovered; naming the apps jobs did come from points there."""
    loaded = sorted(
        {
            config.label if config is not None else definition.handler.__module__
            for definition in registry.jobs()
            for config in [apps.get_containing_app_config(definition.handler.__module__)]
        }
    )
    sources = ", ".join(loaded) if loaded else "none (no installed app has a jobs.py)"
    return (
        f"job {job_id}: no handler for kind {kind!r} in this worker; it loaded jobs from "
        f"apps: {sources}. If the app declaring {kind!r} is missing from INSTALLED_APPS, "
        "add it there (its jobs.py is autodiscovered)."
    )


def finish(
    job: JobContext[Any],
    transition: Transition | None,
    seconds: float,
    max_result_bytes: int,
    *,
    atomic: bool = False,
) -> Steps[list[Event]]:
    """Write the attempt's outcome, guarded by its run_lease; the events to dispatch once
    it committed (none when the outcome was stale).

    `atomic`: the steps run inside the handler's own transaction (`execution/atomic.py`),
    so what would otherwise be decided here ends it instead, to be rolled back with the
    handler's writes: a stale outcome raises StaleAttempt, a refused one its error."""
    if transition is None:
        try:
            result_json = result_as_json(job, max_result_bytes)
        except AwaError as exc:  # the codec refused the result
            if atomic:
                raise
            # The same value would be refused on every retry: the job fails for good.
            return (yield from _transition(job, unstorable(exc)))
        return (yield from _complete(job, result_json, seconds, atomic))
    return (yield from _transition(job, transition, atomic=atomic))


def _complete(
    job: JobContext[Any], result_json: str | None, seconds: float, atomic: bool
) -> Steps[list[Event]]:
    duration = timedelta(seconds=seconds)
    completion = Completion(job.row, result_json)
    # Only a kind with completion follow-ups leaves the batch: its inserts need the
    # completion's own transaction (decision 015).
    wants = follow_ups.wanted(Completed, job.kind)
    step: Step = completion
    if wants:
        step = Outcome(completion.query(), lambda r: Completed(job=r, duration=duration))
    try:
        applied = yield step
    except REFUSALS as exc:
        if atomic:
            raise
        return (yield from _transition(job, _refused(job, exc)))
    if applied is None:
        return _stale(job, atomic)
    return [Completed(job=applied, duration=duration)]


def _refused(job: JobContext[Any], exc: BaseException) -> Transition:
    """What follows an outcome the database or a follow-up builder refused."""
    if isinstance(exc, FollowUpFailed):
        # Like a handler error: retried with backoff, exhausted on the last attempt.
        return failure(job, exc)
    if isinstance(exc, OutcomeRefused):  # not its values: the attempt is retried (036)
        logger.warning("job %s: the database refused its outcome, retried: %s", job.id, exc)
        return plan_refused(job.row, exc)
    logger.warning("job %s: the database cannot store its outcome: %s", job.id, exc)
    return unstorable(exc)


def _transition(
    job: JobContext[Any], transition: Transition, *, atomic: bool = False, built: bool = True
) -> Steps[list[Event]]:
    transition = routed(transition, dead_lettered(job.row.queue, awa_settings().dead_letter_queues))
    query = _set_state(job, transition)
    wants = built and transition.event is not None and follow_ups.wanted(transition.event, job.kind)
    try:
        row = yield Outcome(query, lambda r: event_for(transition, r)) if wants else query
    except REFUSALS as exc:
        if atomic:
            raise
        if _written_after_a_refusal(transition):
            raise  # even the failure of a refused outcome was refused: rescue ends it
        if isinstance(exc, FollowUpFailed) and transition.event in (Retried, Exhausted):
            # A failure cannot fail again: it is written without its follow-ups, so the
            # job still leaves `running` (the builder's error is logged; decision 015).
            return (yield from _transition(job, transition, built=False))
        return (yield from _transition(job, _refused(job, exc)))
    if row is not None:
        return [event_for(transition, row)] if transition.event is not None else []
    if transition.callback_id is None:
        return _stale(job, atomic)
    # The park matched nothing: either the callback was resolved before the park landed
    # (stale), or the handler returned a token that is not the job's current callback.
    current = yield jobs_sql.job_get(id=job.id)
    violation = after_refused_park(job.row, current)
    if violation is None:
        return _stale(job, atomic)
    return (yield from _transition(job, violation, atomic=atomic))


def _written_after_a_refusal(t: Transition) -> bool:
    """`t` is the failure written after the database refused an outcome (its values:
    OutcomeNotStored; anything else: OutcomeRefused, decision 036)."""
    return t.error_class is OutcomeNotStored or t.error_class is OutcomeRefused


def _set_state(job: JobContext[Any], t: Transition) -> Query[JobSnapshot | None]:
    # An unstorable progress may be what the database refused: the failure leaves it out.
    progress = None if t.error_class is OutcomeNotStored else job.progress_json()
    if t.dead_letter is not None:
        return dead_letters_sql.job_dead_letter_if_running(
            id=job.id,
            run_lease=job.run_lease,
            reason=t.dead_letter,
            error=t.error,
            error_type=t.error_type,
            terminal=t.terminal,
            progress=progress,
        )
    return jobs_sql.job_set_state_if_running(
        id=job.id,
        run_lease=job.run_lease,
        move=t.move,
        delay_seconds=t.delay_seconds,
        error=t.error,
        error_type=t.error_type,
        terminal=t.terminal,
        progress=progress,
        callback_id=t.callback_id,
    )


def _stale(job: JobContext[Any], atomic: bool = False) -> list[Event]:
    if atomic:  # rolls the handler's writes back with it (execution/atomic.py)
        raise StaleAttempt(f"job {job.id} is no longer running under run_lease {job.run_lease}")
    logger.info(
        "outcome of job %s (run_lease %s) is stale: it was rescued, cancelled or "
        "resolved meanwhile; ignored",
        job.id,
        job.run_lease,
    )
    return []


def result_as_json(job: JobContext[Any], limit: int) -> str | None:
    """`job.result` as JSON for the `result` column (None when the handler set none)."""
    if job.result is None:
        return None
    return dumps(job.result, what=f"result of job {job.id}", limit=limit)


# -- what a running handler asks of its row -----------------------------------------------
# Both schedulers refuse a blocking JobContext method called from an async handler (it would
# block the loop the handler runs on) with this message.
BLOCKING_FROM_ASYNC = (
    "called a blocking JobContext method from an async handler; use its async twin "
    "(`await job.aregister_callback()`, `await job.await_for_callback()`, "
    "`await job.aflush_progress()`)"
)


def register_callback(job: JobContext[Any], timeout: float) -> Steps[CallbackToken]:
    """Register a fresh callback for this attempt; StaleAttempt if it lost the job."""
    if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout < 0:
        raise ValueError(
            f"callback timeout must be a finite number of seconds >= 0, got {timeout!r}"
        )
    token = yield jobs_sql.job_register_callback(
        id=job.id, run_lease=job.run_lease, callback_id=uuid.uuid4(), timeout_seconds=timeout
    )
    if token is None:
        raise StaleAttempt(f"job {job.id} is no longer running under this attempt")
    return CallbackToken(id=token[0], timeout_at=token[1])


def flush_progress(job: JobContext[Any]) -> Steps[None]:
    """Write the buffered progress now, if it changed since the last flush."""
    progress = job.take_progress()
    if progress is not None:
        yield jobs_sql.job_progress_flush(
            id=job.id, run_lease=job.run_lease, progress=dumps(progress, what="progress")
        )


# -- drivers ------------------------------------------------------------------------------
def drive(steps: Steps[T], execute: Callable[[Step], Any]) -> T:
    """Run `steps` to the end, executing each step synchronously. A step's refusal
    (`OutcomeNotStored`, `FollowUpFailed`) is thrown back into the steps, which decide
    what follows."""
    try:
        step = next(steps)
        while True:
            try:
                answer = execute(step)
            except REFUSALS as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(answer)
    except StopIteration as done:
        result: T = done.value
        return result


async def adrive(steps: Steps[T], execute: Callable[[Step], Awaitable[Any]]) -> T:
    """`drive` for a scheduler whose steps are awaited."""
    try:
        step = next(steps)
        while True:
            try:
                answer = await execute(step)
            except REFUSALS as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(answer)
    except StopIteration as done:
        result: T = done.value
        return result
