"""The Client: enqueue, operator actions and callback resolution, on Django's connection.

Everything here joins the caller's transaction: a job enqueued inside
`transaction.atomic()` exists iff that transaction commits, and its wake-up NOTIFY is
delivered only then. Events for transitions made here are dispatched on commit.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.db import transaction

from . import hooks, storage
from .channels import channel_for
from .codec import dumps, encode_args
from .conf import awa_settings, validate_queue_name
from .events import Cancelled, Completed, Event, Exhausted, Retried
from .exceptions import (
    AwaError,
    CallbackNotFound,
    InvalidEnqueueOption,
    JobNotFound,
    UnknownJobKind,
)
from .registry import kind_for, registry
from .snapshot import COLUMNS, JobRow
from .sql import Statement
from .sql import admin as admin_sql
from .sql import callbacks as callbacks_sql
from .sql import jobs as jobs_sql
from .states import JobState

MIN_PRIORITY, MAX_PRIORITY = -98, 102
MAX_TAGS = 20
# Ten years: far beyond any real external wait, far below PostgreSQL's interval range.
MAX_CALLBACK_TIMEOUT = 10 * 365 * 86400.0
DEFAULT_ACTION_FAIL_ERROR = "callback failed: default action"
DefaultAction = Literal["complete", "fail", "ignore"]


class InvalidCallbackOption(AwaError, ValueError):
    """A callback operation got an option out of range (timeout, error text, default_action)."""


@dataclass(frozen=True, slots=True)
class ResolveResult:
    """What `resolve_callback` did: `outcome` is "complete", "fail" or "ignore"; `job` is the
    committed row (unchanged for "ignore"); `payload` is the payload it was given."""

    outcome: DefaultAction
    job: JobRow
    payload: Any


@dataclass(frozen=True, slots=True)
class _Insert:
    """One validated row, ready for job_insert_one / job_insert_many."""

    kind: str
    queue: str
    args: str
    state: str
    priority: int
    max_attempts: int
    run_at: dt.datetime | None
    metadata: str
    tags: list[str]


class Client:
    """Operations on jobs through Django's database connection `using`."""

    def __init__(self, using: str | None = None) -> None:
        self._using = using

    @property
    def using(self) -> str:
        return self._using or awa_settings().database

    # -- enqueue ------------------------------------------------------------------------
    def enqueue(
        self,
        args: Any,
        *,
        kind: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        max_attempts: int | None = None,
        tags: Sequence[str] = (),
        metadata: dict[str, Any] | None = None,
    ) -> JobRow:
        """Insert one job in the caller's transaction and return its row.

        Raises SerializationError / PayloadTooLarge for args that cannot be stored,
        UnknownJobKind for a dict without `kind`, InvalidQueueName, InvalidEnqueueOption.
        """
        row = self._prepare(args, kind, queue, priority, run_at, max_attempts, tags, metadata)
        channels = [channel_for(row.queue)] if row.state == JobState.AVAILABLE else []
        params = {**_as_params(row), "channels": channels}
        return storage.fetch_jobs(self.using, jobs_sql.job_insert_one, params)[0]

    def enqueue_many(
        self,
        jobs: Iterable[Any],
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        max_attempts: int | None = None,
        tags: Sequence[str] = (),
        metadata: dict[str, Any] | None = None,
    ) -> list[int]:
        """Insert many jobs (args instances sharing the given options) in one statement and
        one round trip, in the caller's transaction; returns their ids in input order."""
        rows = [
            self._prepare(a, None, queue, priority, run_at, max_attempts, tags, metadata)
            for a in jobs
        ]
        if not rows:
            return []
        params = {
            "kinds": [r.kind for r in rows],
            "queues": [r.queue for r in rows],
            "args": [r.args for r in rows],
            "states": [r.state for r in rows],
            "priorities": [r.priority for r in rows],
            "max_attempts": [r.max_attempts for r in rows],
            "run_ats": [r.run_at for r in rows],
            "metadata": [r.metadata for r in rows],
            "tags": [dumps(r.tags, what="tags") for r in rows],
            "channels": sorted(
                {channel_for(r.queue) for r in rows if r.state == JobState.AVAILABLE}
            ),
        }
        return [r[0] for r in storage.fetch_rows(self.using, jobs_sql.job_insert_many, params)]

    def _prepare(
        self,
        args: Any,
        kind: str | None,
        queue: str | None,
        priority: int | None,
        run_at: dt.datetime | None,
        max_attempts: int | None,
        tags: Sequence[str],
        metadata: dict[str, Any] | None,
    ) -> _Insert:
        settings = awa_settings()
        if kind is None:
            if isinstance(args, dict):
                raise UnknownJobKind("enqueueing a dict needs an explicit kind=")
            kind = kind_for(type(args))
        definition = registry.job(kind)
        queue = validate_queue_name(queue or (definition.queue if definition else "default"))
        priority = definition.priority if priority is None and definition else priority
        priority = 2 if priority is None else priority
        if max_attempts is None:
            max_attempts = definition.max_attempts if definition else 25
        _check_options(priority, max_attempts, tags, run_at)
        return _Insert(
            kind=kind,
            queue=queue,
            args=dumps(encode_args(args), what=f"args of {kind}", limit=settings.max_args_bytes),
            state=JobState.AVAILABLE if run_at is None else JobState.SCHEDULED,
            priority=priority,
            max_attempts=max_attempts,
            run_at=run_at,
            metadata=dumps(metadata or {}, what="metadata", limit=settings.max_args_bytes),
            tags=list(tags),
        )

    # -- operator actions ---------------------------------------------------------------
    def get_job(self, job_id: int) -> JobRow:
        rows = storage.fetch_jobs(self.using, jobs_sql.job_get, {"id": job_id})
        if not rows:
            raise JobNotFound(f"no job with id {job_id}")
        return rows[0]

    def cancel(self, job_id: int) -> JobRow | None:
        """Cancel a non-terminal job; None if it was already terminal. A running attempt's
        later outcome becomes stale and its `is_cancelled()` turns true. Fires Cancelled."""
        rows = self.cancel_many([job_id])
        return rows[0] if rows else None

    def cancel_many(self, job_ids: Iterable[int]) -> list[JobRow]:
        ids = sorted(set(job_ids))
        with transaction.atomic(using=self.using):
            rows = storage.fetch_jobs(self.using, admin_sql.job_cancel_many, {"ids": ids})
            if rows:
                cancelled = {"ids": [r.id for r in rows]}
                storage.fetch_rows(self.using, callbacks_sql.lease_delete_for_jobs, cancelled)
            self._on_commit([Cancelled(job=r, reason="cancelled by operator") for r in rows])
        return rows

    def retry(self, job_id: int) -> JobRow | None:
        """Make a failed, cancelled or parked job available again (attempts reset);
        None if the job is in another state."""
        rows = self.retry_many([job_id])
        return rows[0] if rows else None

    def retry_many(self, job_ids: Iterable[int]) -> list[JobRow]:
        ids = sorted(set(job_ids))
        return storage.fetch_jobs(self.using, admin_sql.job_retry_many, {"ids": ids})

    # -- callback resolution (reference T12-T15; docs/callbacks.md) --------------------
    # Each runs one guarded statement in the caller's transaction and dispatches its event
    # once the outermost transaction commits. Zero rows (unknown id, already resolved,
    # timed out, wrong state or wrong run_lease) raise CallbackNotFound.
    def complete_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobRow:
        """Complete a waiting_external (or still running) job. Fires Completed(duration 0).
        The payload is not stored; use `resume_external` to hand one to a waiting handler."""
        with transaction.atomic(using=self.using):
            return self._complete(_callback_uuid(callback_id), run_lease)

    def fail_external(
        self, callback_id: uuid.UUID | str, error: str, *, run_lease: int | None = None
    ) -> JobRow:
        """Fail a waiting_external (or still running) job for good. Fires Exhausted."""
        with transaction.atomic(using=self.using):
            return self._fail(_callback_uuid(callback_id), _error_text(error), run_lease)

    def retry_external(self, callback_id: uuid.UUID | str) -> JobRow:
        """Make a waiting_external job available again with its attempts reset. Fires
        Retried (attempt = the parked attempt, next_run_at = the new run_at)."""
        params = {"callback_id": _callback_uuid(callback_id)}
        with transaction.atomic(using=self.using):
            rows = storage.fetch_rows(self.using, callbacks_sql.job_retry_external, params)
            if not rows:
                raise _not_found(callback_id, "retry_external")
            job = JobRow.from_tuple(COLUMNS, rows[0])
            parked_attempt = rows[0][len(COLUMNS)]
            self._on_commit([Retried(job=job, attempt=parked_attempt, next_run_at=job.run_at)])
        return job

    def resume_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobRow:
        """Hand `payload` to the handler waiting in `wait_for_callback`; the job is running
        again. Fires nothing: the resumed attempt reports its own outcome."""
        params = {
            "callback_id": _callback_uuid(callback_id),
            "run_lease": run_lease,
            "payload": dumps(payload, what="callback payload", limit=awa_settings().max_args_bytes),
        }
        with transaction.atomic(using=self.using):
            return self._one(callbacks_sql.job_resume_external, params, "resume_external")

    def heartbeat_callback(self, callback_id: uuid.UUID | str, timeout: float = 3600) -> JobRow:
        """Push a waiting_external job's callback timeout to now + `timeout` seconds
        (database clock). Fires nothing."""
        params = {"callback_id": _callback_uuid(callback_id), "timeout_seconds": _timeout(timeout)}
        with transaction.atomic(using=self.using):
            return self._one(callbacks_sql.job_heartbeat_callback, params, "heartbeat_callback")

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
        cb = _callback_uuid(callback_id)
        params = {"callback_id": cb, "run_lease": run_lease}
        with transaction.atomic(using=self.using):
            job = self._one(callbacks_sql.job_lock_by_callback, params, "resolve_callback")
            if default_action == "complete":
                job = self._complete(cb, run_lease)
            elif default_action == "fail":
                job = self._fail(cb, DEFAULT_ACTION_FAIL_ERROR, run_lease)
        return ResolveResult(outcome=default_action, job=job, payload=payload)

    def _complete(self, callback_id: uuid.UUID, run_lease: int | None) -> JobRow:
        params = {"callback_id": callback_id, "run_lease": run_lease}
        job = self._one(callbacks_sql.job_complete_external, params, "complete_external")
        self._on_commit([Completed(job=job, duration=dt.timedelta(0))])
        return job

    def _fail(self, callback_id: uuid.UUID, error: str, run_lease: int | None) -> JobRow:
        params = {"callback_id": callback_id, "run_lease": run_lease, "error": error}
        job = self._one(callbacks_sql.job_fail_external, params, "fail_external")
        self._on_commit([Exhausted(job=job, error=error, attempt=job.attempt)])
        return job

    def _one(self, statement: Statement, params: dict[str, Any], verb: str) -> JobRow:
        lease = params.get("run_lease")
        if lease is not None and (isinstance(lease, bool) or not isinstance(lease, int)):
            raise InvalidCallbackOption(f"run_lease must be an int or None, got {lease!r:.100}")
        rows = storage.fetch_jobs(self.using, statement, params)
        if not rows:
            raise _not_found(params["callback_id"], verb)
        return rows[0]

    # -- async twins --------------------------------------------------------------------
    async def acomplete_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobRow:
        return await sync_to_async(self.complete_external)(
            callback_id, payload, run_lease=run_lease
        )

    async def afail_external(
        self, callback_id: uuid.UUID | str, error: str, *, run_lease: int | None = None
    ) -> JobRow:
        return await sync_to_async(self.fail_external)(callback_id, error, run_lease=run_lease)

    async def aretry_external(self, callback_id: uuid.UUID | str) -> JobRow:
        return await sync_to_async(self.retry_external)(callback_id)

    async def aresume_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobRow:
        return await sync_to_async(self.resume_external)(callback_id, payload, run_lease=run_lease)

    async def aheartbeat_callback(
        self, callback_id: uuid.UUID | str, timeout: float = 3600
    ) -> JobRow:
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

    def _on_commit(self, events: Sequence[Event]) -> None:
        """Dispatch `events` once the caller's outermost transaction commits. `robust`: the
        transition has committed by then, so a failure while dispatching is logged, never
        raised into a caller whose operation succeeded."""
        for event in events:
            transaction.on_commit(_dispatcher(event), using=self.using, robust=True)


def _dispatcher(event: Event) -> Callable[[], None]:
    return lambda: hooks.dispatch(event)


def _callback_uuid(callback_id: uuid.UUID | str) -> uuid.UUID:
    if isinstance(callback_id, uuid.UUID):
        return callback_id
    try:
        return uuid.UUID(str(callback_id))
    except ValueError:
        raise CallbackNotFound(
            f"no pending callback {callback_id!r}: callback ids are UUIDs"
        ) from None


def _not_found(callback_id: object, verb: str) -> CallbackNotFound:
    return CallbackNotFound(
        f"no pending callback {callback_id} for {verb}: unknown, already resolved, timed "
        "out, or its job is not in a state (or run_lease) that allows it"
    )


def _error_text(error: object) -> str:
    if not isinstance(error, str) or not error.strip():
        raise InvalidCallbackOption(f"error must be a non-empty string, got {error!r:.100}")
    if "\x00" in error:
        raise InvalidCallbackOption("error contains a NUL character, which PostgreSQL rejects")
    return error


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


def _check_options(
    priority: int, max_attempts: int, tags: Sequence[str], run_at: dt.datetime | None
) -> None:
    if not isinstance(priority, int) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidEnqueueOption(
            f"priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} "
            f"(1 urgent .. 4 batch is the usual scale), got {priority!r}"
        )
    if not isinstance(max_attempts, int) or not 1 <= max_attempts <= 1000:
        raise InvalidEnqueueOption(f"max_attempts must be 1..1000, got {max_attempts!r}")
    if isinstance(tags, str) or len(tags) > MAX_TAGS:
        raise InvalidEnqueueOption(f"tags must be a list of at most {MAX_TAGS} strings")
    if not all(isinstance(t, str) and 0 < len(t) <= 200 for t in tags):
        raise InvalidEnqueueOption("each tag must be a non-empty string of at most 200 chars")
    if run_at is not None and (not isinstance(run_at, dt.datetime) or run_at.tzinfo is None):
        raise InvalidEnqueueOption("run_at must be a timezone-aware datetime")


def _as_params(row: _Insert) -> dict[str, Any]:
    return {
        "kind": row.kind,
        "queue": row.queue,
        "args": row.args,
        "state": row.state,
        "priority": row.priority,
        "max_attempts": row.max_attempts,
        "run_at": row.run_at,
        "metadata": row.metadata,
        "tags": row.tags,
    }


client = Client()


def enqueue(args: Any, **options: Any) -> JobRow:
    """Enqueue one job in the current transaction. See `Client.enqueue`."""
    return Client(options.pop("using", None)).enqueue(args, **options)


def enqueue_many(jobs: Iterable[Any], **options: Any) -> list[int]:
    """Enqueue many jobs in one round trip. See `Client.enqueue_many`."""
    return Client(options.pop("using", None)).enqueue_many(jobs, **options)


async def aenqueue(args: Any, **options: Any) -> JobRow:
    return await sync_to_async(enqueue)(args, **options)


async def aenqueue_many(jobs: Iterable[Any], **options: Any) -> list[int]:
    return await sync_to_async(enqueue_many)(jobs, **options)
