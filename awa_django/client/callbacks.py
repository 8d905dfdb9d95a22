"""Callback resolution: how an outside system finishes a job parked on a callback.

`Client` inherits these methods (DESIGN §6, reference T12-T15; docs/callbacks.md). Each
runs one guarded statement in the caller's transaction and dispatches its event once the
outermost transaction commits, in this process only. Zero rows (unknown id, already
resolved, timed out, wrong state or wrong run_lease) raise CallbackNotFound.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.db import transaction

from awa_django.codec import dumps, storable_text, unstorable_character
from awa_django.conf import awa_settings
from awa_django.events import Completed, Event, Exhausted, Retried
from awa_django.exceptions import CallbackNotFound, InvalidCallbackOption
from awa_django.snapshot import JobSnapshot
from awa_django.storage.query import Query
from awa_django.storage.sql import callbacks as callbacks_sql

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


class CallbackResolution:
    """The callback verbs of `Client`; it supplies `using` and `_on_commit`."""

    @property
    def using(self) -> str:
        raise NotImplementedError

    def _on_commit(self, events: Sequence[Event]) -> None:
        raise NotImplementedError

    # Each runs one guarded statement in the caller's transaction and dispatches its event
    # once the outermost transaction commits. Zero rows (unknown id, already resolved,
    # timed out, wrong state or wrong run_lease) raise CallbackNotFound.
    def complete_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobSnapshot:
        """Complete a waiting_external (or still running) job. Fires Completed(duration 0).
        The payload is not stored; use `resume_external` to hand one to a waiting handler."""
        with transaction.atomic(using=self.using):
            return self._complete(_callback_uuid(callback_id), run_lease)

    def fail_external(
        self, callback_id: uuid.UUID | str, error: str, *, run_lease: int | None = None
    ) -> JobSnapshot:
        """Fail a waiting_external (or still running) job for good. Fires Exhausted."""
        with transaction.atomic(using=self.using):
            return self._fail(_callback_uuid(callback_id), _error_text(error), run_lease)

    def retry_external(self, callback_id: uuid.UUID | str) -> JobSnapshot:
        """Make a waiting_external job available again with its attempts reset. Fires
        Retried (attempt = the parked attempt, next_run_at = the new run_at)."""
        query = callbacks_sql.job_retry_external(callback_id=_callback_uuid(callback_id))
        with transaction.atomic(using=self.using):
            retried = query.run(self.using)
            if retried is None:
                raise _not_found(callback_id, "retry_external")
            job, parked_attempt = retried
            self._on_commit([Retried(job=job, attempt=parked_attempt, next_run_at=job.run_at)])
        return job

    def resume_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobSnapshot:
        """Hand `payload` to the handler waiting in `wait_for_callback`; the job is running
        again. Fires nothing: the resumed attempt reports its own outcome."""
        query = callbacks_sql.job_resume_external(
            callback_id=_callback_uuid(callback_id),
            run_lease=_run_lease(run_lease),
            payload=dumps(payload, what="callback payload", limit=awa_settings().max_args_bytes),
        )
        with transaction.atomic(using=self.using):
            return self._one(query, callback_id, "resume_external")

    def heartbeat_callback(
        self, callback_id: uuid.UUID | str, timeout: float = 3600
    ) -> JobSnapshot:
        """Push a waiting_external job's callback timeout to now + `timeout` seconds
        (database clock). Fires nothing."""
        query = callbacks_sql.job_heartbeat_callback(
            callback_id=_callback_uuid(callback_id), timeout_seconds=_timeout(timeout)
        )
        with transaction.atomic(using=self.using):
            return self._one(query, callback_id, "heartbeat_callback")

    def resolve_callback(
        self,
        callback_id: uuid.UUID | str,
        payload: Any = None,
        default_action: DefaultAction = "ignore",
        *,
        run_lease: int | None = None,
    ) -> ResolveResult:
        """Apply `default_action` to a pending callback, with the row locked FOR UPDATE.

        Awa decides with CEL expressions stored at registration; awa-django has no CEL, so
        the default action always applies: "complete" (fires Completed), "fail" (error
        "callback failed: default action", fires Exhausted) or "ignore" (no change, no
        event; the callback stays pending).
        """
        if default_action not in ("complete", "fail", "ignore"):
            raise InvalidCallbackOption(
                f'default_action must be "complete", "fail" or "ignore", got {default_action!r}'
            )
        cb, lease = _callback_uuid(callback_id), _run_lease(run_lease)
        with transaction.atomic(using=self.using):
            locked = callbacks_sql.job_lock_by_callback(callback_id=cb, run_lease=lease)
            job = self._one(locked, cb, "resolve_callback")
            if default_action == "complete":
                job = self._complete(cb, run_lease)
            elif default_action == "fail":
                job = self._fail(cb, DEFAULT_ACTION_FAIL_ERROR, run_lease)
        return ResolveResult(outcome=default_action, job=job, payload=payload)

    def _complete(self, callback_id: uuid.UUID, run_lease: int | None) -> JobSnapshot:
        query = callbacks_sql.job_complete_external(
            callback_id=callback_id, run_lease=_run_lease(run_lease)
        )
        job = self._one(query, callback_id, "complete_external")
        self._on_commit([Completed(job=job, duration=dt.timedelta(0))])
        return job

    def _fail(self, callback_id: uuid.UUID, error: str, run_lease: int | None) -> JobSnapshot:
        query = callbacks_sql.job_fail_external(
            callback_id=callback_id, run_lease=_run_lease(run_lease), error=error
        )
        job = self._one(query, callback_id, "fail_external")
        self._on_commit([Exhausted(job=job, error=error, attempt=job.attempt)])
        return job

    def _one(self, query: Query[JobSnapshot | None], callback_id: object, verb: str) -> JobSnapshot:
        job = query.run(self.using)
        if job is None:
            raise _not_found(callback_id, verb)
        return job

    # -- async twins --------------------------------------------------------------------
    async def acomplete_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobSnapshot:
        return await sync_to_async(self.complete_external)(
            callback_id, payload, run_lease=run_lease
        )

    async def afail_external(
        self, callback_id: uuid.UUID | str, error: str, *, run_lease: int | None = None
    ) -> JobSnapshot:
        return await sync_to_async(self.fail_external)(callback_id, error, run_lease=run_lease)

    async def aretry_external(self, callback_id: uuid.UUID | str) -> JobSnapshot:
        return await sync_to_async(self.retry_external)(callback_id)

    async def aresume_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobSnapshot:
        return await sync_to_async(self.resume_external)(callback_id, payload, run_lease=run_lease)

    async def aheartbeat_callback(
        self, callback_id: uuid.UUID | str, timeout: float = 3600
    ) -> JobSnapshot:
        return await sync_to_async(self.heartbeat_callback)(callback_id, timeout)

    async def aresolve_callback(
        self,
        callback_id: uuid.UUID | str,
        payload: Any = None,
        default_action: DefaultAction = "ignore",
        *,
        run_lease: int | None = None,
    ) -> ResolveResult:
        return await sync_to_async(self.resolve_callback)(
            callback_id, payload, default_action, run_lease=run_lease
        )


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
