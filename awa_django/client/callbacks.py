"""Callback resolution: how an outside system finishes a job parked on a callback.

The `Client`'s callback verbs call these functions with its database alias (DESIGN §6,
reference T12-T15; docs/callbacks.md). Each checks its input, runs one guarded statement in
the caller's transaction and dispatches its event once the outermost transaction commits,
in this process only. Zero rows (unknown id, already resolved, timed out, wrong state or
wrong run_lease) raise CallbackNotFound. The follow-up jobs of a resolution are inserted
in its transaction (a builder that fails raises FollowUpFailed: nothing changes).
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction

from awa_django.client.delivery import dispatch_on_commit
from awa_django.codec import dumps, storable_text, unstorable_character
from awa_django.conf import awa_settings
from awa_django.events import Completed, Exhausted, Retried
from awa_django.exceptions import CallbackNotFound, InvalidCallbackOption
from awa_django.execution import follow_ups
from awa_django.snapshot import JobSnapshot
from awa_django.storage.query import Query
from awa_django.storage.sql import callbacks as callbacks_sql
from awa_django.storage.sql.transitions import dead_lettered

# Ten years: far beyond any real external wait, far below PostgreSQL's interval range.
MAX_CALLBACK_TIMEOUT = 10 * 365 * 86400.0
DEFAULT_ACTION_FAIL_ERROR = "callback failed: default action"
DefaultAction = Literal["complete", "fail", "ignore"]


@dataclass(frozen=True, slots=True)
class ResolveResult:
    """What `resolve_callback` did: `outcome` is "complete", "fail" or "ignore"; `job` is the
    committed row (unchanged for "ignore"); `payload` is the payload it was given."""

    outcome: DefaultAction
    job: JobSnapshot
    payload: Any


# Each runs one guarded statement in the caller's transaction (or its own) on Django's
# connection `using`, and dispatches its event once the outermost transaction commits.
def complete_external(using: str, callback_id: uuid.UUID | str, run_lease: object) -> JobSnapshot:
    with transaction.atomic(using=using):
        return _complete(using, _callback_uuid(callback_id), run_lease)


def fail_external(
    using: str, callback_id: uuid.UUID | str, error: object, run_lease: object
) -> JobSnapshot:
    with transaction.atomic(using=using):
        return _fail(using, _callback_uuid(callback_id), _error_text(error), run_lease)


def retry_external(using: str, callback_id: uuid.UUID | str) -> JobSnapshot:
    query = callbacks_sql.job_retry_external(callback_id=_callback_uuid(callback_id))
    with transaction.atomic(using=using):
        retried = query.run(using)
        if retried is None:
            raise _not_found(callback_id, "retry_external")
        job, parked_attempt = retried
        events = [Retried(job=job, attempt=parked_attempt, next_run_at=job.run_at)]
        follow_ups.enqueue_for(events, using)
        dispatch_on_commit(events, using)
    return job


def resume_external(
    using: str, callback_id: uuid.UUID | str, payload: Any, run_lease: object
) -> JobSnapshot:
    query = callbacks_sql.job_resume_external(
        callback_id=_callback_uuid(callback_id),
        run_lease=_run_lease(run_lease),
        payload=dumps(payload, what="callback payload", limit=awa_settings().max_args_bytes),
    )
    with transaction.atomic(using=using):
        return _one(using, query, callback_id, "resume_external")


def heartbeat_callback(using: str, callback_id: uuid.UUID | str, timeout: object) -> JobSnapshot:
    query = callbacks_sql.job_heartbeat_callback(
        callback_id=_callback_uuid(callback_id), timeout_seconds=_timeout(timeout)
    )
    with transaction.atomic(using=using):
        return _one(using, query, callback_id, "heartbeat_callback")


def resolve_callback(
    using: str,
    callback_id: uuid.UUID | str,
    payload: Any,
    default_action: DefaultAction,
    run_lease: object,
) -> ResolveResult:
    if default_action not in ("complete", "fail", "ignore"):
        raise InvalidCallbackOption(
            f'default_action must be "complete", "fail" or "ignore", got {default_action!r}'
        )
    cb, lease = _callback_uuid(callback_id), _run_lease(run_lease)
    with transaction.atomic(using=using):
        locked = callbacks_sql.job_lock_by_callback(callback_id=cb, run_lease=lease)
        job = _one(using, locked, cb, "resolve_callback")
        if default_action == "complete":
            job = _complete(using, cb, lease)
        elif default_action == "fail":
            job = _fail(using, cb, DEFAULT_ACTION_FAIL_ERROR, lease)
    return ResolveResult(outcome=default_action, job=job, payload=payload)


def _complete(using: str, callback_id: uuid.UUID, run_lease: object) -> JobSnapshot:
    query = callbacks_sql.job_complete_external(
        callback_id=callback_id, run_lease=_run_lease(run_lease)
    )
    job = _one(using, query, callback_id, "complete_external")
    events = [Completed(job=job, duration=dt.timedelta(0))]
    follow_ups.enqueue_for(events, using)
    dispatch_on_commit(events, using)
    return job


def _fail(using: str, callback_id: uuid.UUID, error: str, run_lease: object) -> JobSnapshot:
    # On a dead-letter queue the job moves to the dead letters (decision 016): the statement
    # moves exactly the rows of these queues, so the returned row's queue says which it did.
    dead_letter_queues = awa_settings().dead_letter_queues
    query = callbacks_sql.job_fail_external(
        callback_id=callback_id,
        run_lease=_run_lease(run_lease),
        error=error,
        dead_letter_queues=dead_letter_queues,
    )
    job = _one(using, query, callback_id, "fail_external")
    dead = dead_lettered(job.queue, dead_letter_queues)
    events = [Exhausted(job=job, error=error, attempt=job.attempt, dead_lettered=dead)]
    follow_ups.enqueue_for(events, using)
    dispatch_on_commit(events, using)
    return job


def _one(
    using: str, query: Query[JobSnapshot | None], callback_id: object, verb: str
) -> JobSnapshot:
    job = query.run(using)
    if job is None:
        raise _not_found(callback_id, verb)
    return job


def _callback_uuid(callback_id: uuid.UUID | str) -> uuid.UUID:
    if isinstance(callback_id, uuid.UUID):
        return callback_id
    try:
        return uuid.UUID(str(callback_id))
    except ValueError:
        raise CallbackNotFound(
            f"no pending callback {callback_id!r}: callback ids are UUIDs"
        ) from None


def _run_lease(lease: object) -> int | None:
    if lease is not None and (isinstance(lease, bool) or not isinstance(lease, int)):
        raise InvalidCallbackOption(f"run_lease must be an int or None, got {lease!r:.100}")
    return lease


def _not_found(callback_id: object, verb: str) -> CallbackNotFound:
    return CallbackNotFound(
        f"no pending callback {callback_id} for {verb}: unknown, already resolved, timed "
        "out, or its job is not in a state (or run_lease) that allows it"
    )


def _error_text(error: object) -> str:
    """The error text as stored. The caller chose it, so a character PostgreSQL cannot hold
    is refused rather than silently replaced; a text over MAX_ERROR_BYTES is cut (marked),
    as every stored error text is, because the entry is written on the hot row."""
    if not isinstance(error, str) or not error.strip():
        raise InvalidCallbackOption(f"error must be a non-empty string, got {error!r:.100}")
    if problem := unstorable_character(error):
        raise InvalidCallbackOption(f"error contains {problem}, which PostgreSQL cannot store")
    return storable_text(error)


def _timeout(timeout: object) -> float:
    """Seconds as a finite float in 0..MAX_CALLBACK_TIMEOUT."""
    if isinstance(timeout, dt.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidCallbackOption(f"timeout must be a number of seconds, got {timeout!r:.100}")
    if not math.isfinite(timeout) or not 0 <= timeout <= MAX_CALLBACK_TIMEOUT:
        raise InvalidCallbackOption(
            f"timeout must be finite and 0..{MAX_CALLBACK_TIMEOUT:.0f} seconds, got {timeout!r}"
        )
    return float(timeout)
