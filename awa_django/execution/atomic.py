"""Attempts on Django's connection: each step of `attempt.py` run there, and the atomic
attempt, whose `def` handler and guarded outcome share one transaction (decision 015).

    with transaction.atomic(using=<job database>):
        handler(job)                      # its writes, and jobs it enqueues
        attempt.finish(..., atomic=True)  # the guarded completion (+ follow-ups)

Both schedulers call `run()` on the thread that runs the handler (the worker's sync thread
pool, the inline runner's caller), so the handler's writes and its completion go through
the same connection. The outcome commits with the handler's writes or not at all: a stale
guard raises inside the block (rolled back, ended quietly, no event); a handler that
raises, or an outcome that cannot be stored, rolls the block back, and the scheduler then
writes the failure on its own, the non-atomic way.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import DatabaseError, connections, transaction

from awa_django.events import Event
from awa_django.exceptions import (
    FollowUpFailed,
    OutcomeNotStored,
    OutcomeRefused,
    PayloadTooLarge,
    SerializationError,
    StaleAttempt,
)
from awa_django.execution import attempt
from awa_django.execution.context import JobContext
from awa_django.execution.outcomes import Transition, plan_refused, unstorable
from awa_django.storage.refusals import refusal

logger = logging.getLogger("awa_django.worker")


@dataclass(frozen=True, slots=True)
class Committed:
    """An atomic attempt's outcome committed with its handler's writes (or was stale:
    then nothing committed and `events` is empty)."""

    events: list[Event]


def execute_step(using: str, step: attempt.Step, *, savepoint: bool = True) -> Any:
    """Run one attempt step on Django's connection `using`. Inside the caller's
    transaction a savepoint keeps it usable after a refused write; an `Outcome` (a
    transition with follow-ups) always gets a transaction (or savepoint) of its own.
    `savepoint=False` inside an atomic attempt: a refused write ends the whole block."""
    query = step.query() if isinstance(step, attempt.Completion) else step
    wrap = savepoint and (connections[using].in_atomic_block or isinstance(step, attempt.Outcome))
    try:
        with transaction.atomic(using=using) if wrap else nullcontext():
            if isinstance(query, attempt.Outcome):
                return _write_outcome(using, query)
            return query.run(using)
    except (DatabaseError, UnicodeError) as exc:
        raise refusal(exc) from exc


def _write_outcome(using: str, step: attempt.Outcome) -> Any:
    row = step.query.run(using)
    if row is not None and (inserts := step.follow_ups(row)) is not None:
        inserts.run(using)
    return row


def run(
    job: JobContext[Any],
    handler: Callable[[JobContext[Any]], Any],
    using: str,
    max_result_bytes: int,
) -> Committed | Transition | None:
    """Run `handler` and write its outcome in one transaction on `using`. Committed: the
    outcome is written (events to dispatch), or was stale. A Transition: nothing of the
    attempt committed; the scheduler writes it on its own (a failure, or the outcome of a
    handler that wrote nothing; None: a plain completion)."""
    started, in_handler = time.monotonic(), True
    try:
        with transaction.atomic(using=using):
            result = handler(job)
            in_handler = False
            transition = attempt.outcome_of_result(job, result)
            if _nothing_to_commit(using):
                # Nothing of the handler's is in the transaction: its outcome alone is
                # already one guarded statement, so the scheduler writes it the plain
                # (batched) way; leaving the block sends no COMMIT (decision 023).
                return transition
            seconds = time.monotonic() - started
            steps = attempt.finish(job, transition, seconds, max_result_bytes, atomic=True)
            # No savepoint per step: each costs two round trips, and a refused step ends
            # the block anyway (the job then fails on its own).
            unwrapped = functools.partial(execute_step, using, savepoint=False)
            return Committed(attempt.drive(steps, unwrapped))
    except (Exception, SystemExit) as exc:
        # A KeyboardInterrupt propagates (the inline caller's Ctrl-C; the worker's thread
        # hands it to the executor, which fails the job like any handler error).
        if in_handler:
            return attempt.outcome_of_error(job, exc)
        return _after_rollback(job, exc)


def _nothing_to_commit(using: str) -> bool:
    """The handler sent no statement on `using` inside the block (the connection has not
    even begun its transaction) and registered no on_commit callback: committing would
    change nothing, and a stale outcome would have nothing to roll back."""
    wrapper = connections[using]
    raw = wrapper.connection
    if raw is None or wrapper.run_on_commit or len(wrapper.atomic_blocks) != 1:
        return False
    return bool(raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)


def _after_rollback(job: JobContext[Any], exc: BaseException) -> Committed | Transition:
    """What follows an outcome that did not commit with the handler's writes."""
    if isinstance(exc, StaleAttempt):
        logger.info(
            "outcome of atomic job %s (run_lease %s) is stale: it was rescued, cancelled or "
            "resolved meanwhile; its writes were rolled back",
            job.id,
            job.run_lease,
        )
        return Committed([])
    if isinstance(exc, FollowUpFailed):
        return attempt.failure(job, exc)  # like a handler error (decision 015)
    if isinstance(exc, OutcomeRefused):  # not the values' fault: retried (decision 036)
        logger.warning("job %s: the database refused its atomic outcome: %s", job.id, exc)
        return plan_refused(job.row, exc)
    if isinstance(exc, OutcomeNotStored | SerializationError | PayloadTooLarge):
        # Refused values (a result the codec or the database cannot hold) would be
        # refused again on every retry. Anything else (an outage: DatabaseUnavailable, a
        # broken transaction) fails this attempt only, like a handler error.
        logger.warning("job %s: its outcome could not be stored: %s", job.id, exc)
        return unstorable(exc)
    logger.warning("job %s: its atomic outcome failed to commit: %r", job.id, exc)
    return attempt.failure(job, exc)
