"""The Client: enqueue and operator actions on Django's connection (callback resolution
comes from `callbacks.CallbackResolution`).

Everything here joins the caller's transaction: a job enqueued inside
`transaction.atomic()` exists iff that transaction commits, and its wake-up NOTIFY is
delivered only then. Events for transitions made here are dispatched on commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from awa_django.channels import channel_for
from awa_django.client.callbacks import CallbackResolution
from awa_django.codec import dumps, encode_args_json
from awa_django.conf import awa_settings, validate_queue_name
from awa_django.events import Cancelled, Event
from awa_django.exceptions import InvalidEnqueueOption, JobNotFound, UnknownJobKind
from awa_django.registry import dispatch as hooks
from awa_django.registry import kind_for, registry
from awa_django.snapshot import JobSnapshot
from awa_django.states import JobState
from awa_django.storage.sql import admin as admin_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import leases as leases_sql

MIN_PRIORITY, MAX_PRIORITY = -98, 102
MAX_TAGS = 20


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

    @property
    def tags_json(self) -> str:
        # PostgreSQL has no ragged text[][]: job_insert_many takes each row's tags as JSON.
        return dumps(self.tags, what="tags")


class Client(CallbackResolution):
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
    ) -> JobSnapshot:
        """Insert one job in the caller's transaction and return its row.

        Raises SerializationError / PayloadTooLarge for args that cannot be stored,
        UnknownJobKind for a dict without `kind`, InvalidQueueName, InvalidEnqueueOption.
        """
        row = self._prepare(args, kind, queue, priority, run_at, max_attempts, tags, metadata)
        channels = [channel_for(row.queue)] if row.state == JobState.AVAILABLE else []
        return jobs_sql.job_insert_one(
            kind=row.kind,
            queue=row.queue,
            args=row.args,
            state=row.state,
            priority=row.priority,
            max_attempts=row.max_attempts,
            run_at=row.run_at,
            metadata=row.metadata,
            tags=row.tags,
            django_task=None,
            channels=channels,
        ).run(self.using)

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
        limit = awa_settings().max_args_bytes
        # Options are resolved once per args type (they are shared by every job of it);
        # per job only its args are serialised. This loop is the bulk-insert hot path.
        prepared: dict[type, _Insert] = {}
        columns: dict[str, list[Any]] = {name: [] for name in _MANY_COLUMNS}
        for args in jobs:
            template = prepared.get(type(args))
            if template is None:
                template = self._prepare(
                    args, None, queue, priority, run_at, max_attempts, tags, metadata
                )
                prepared[type(args)] = template
                encoded = template.args
            else:
                encoded = encode_args_json(args, what=f"args of {template.kind}", limit=limit)
            _append_row(columns, template, encoded)
        if not columns["kinds"]:
            return []
        channels = {channel_for(t.queue) for t in prepared.values() if t.state == "available"}
        return jobs_sql.job_insert_many(**columns, channels=sorted(channels)).run(self.using)

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
        _check_options(priority, max_attempts, tags, run_at, metadata)
        return _Insert(
            kind=kind,
            queue=queue,
            args=encode_args_json(args, what=f"args of {kind}", limit=settings.max_args_bytes),
            state=JobState.AVAILABLE if run_at is None else JobState.SCHEDULED,
            priority=priority,
            max_attempts=max_attempts,
            run_at=run_at,
            metadata=dumps(metadata or {}, what="metadata", limit=settings.max_args_bytes),
            tags=list(tags),
        )

    # -- operator actions ---------------------------------------------------------------
    def get_job(self, job_id: int) -> JobSnapshot:
        row = jobs_sql.job_get(id=job_id).run(self.using)
        if row is None:
            raise JobNotFound(f"no job with id {job_id}")
        return row

    def cancel(self, job_id: int) -> JobSnapshot | None:
        """Cancel a non-terminal job; None if it was already terminal. A running attempt's
        later outcome becomes stale and its `is_cancelled()` turns true. Fires Cancelled."""
        rows = self.cancel_many([job_id])
        return rows[0] if rows else None

    def cancel_many(self, job_ids: Iterable[int]) -> list[JobSnapshot]:
        ids = sorted(set(job_ids))
        with transaction.atomic(using=self.using):
            rows = admin_sql.job_cancel_many(ids=ids).run(self.using)
            if rows:
                leases_sql.lease_delete_for_jobs(ids=[r.id for r in rows]).run(self.using)
            self._on_commit([Cancelled(job=r, reason="cancelled by operator") for r in rows])
        return rows

    def retry(self, job_id: int) -> JobSnapshot | None:
        """Make a failed, cancelled or parked job available again (attempts reset);
        None if the job is in another state."""
        rows = self.retry_many([job_id])
        return rows[0] if rows else None

    def retry_many(self, job_ids: Iterable[int]) -> list[JobSnapshot]:
        ids = sorted(set(job_ids))
        return admin_sql.job_retry_many(ids=ids).run(self.using)

    def _on_commit(self, events: Sequence[Event]) -> None:
        """Dispatch `events` once the caller's outermost transaction commits. `robust`: the
        transition has committed by then, so a failure while dispatching is logged, never
        raised into a caller whose operation succeeded."""
        for event in events:
            transaction.on_commit(_dispatcher(event), using=self.using, robust=True)


def _dispatcher(event: Event) -> Callable[[], None]:
    return lambda: hooks.dispatch(event)


def _check_options(
    priority: int,
    max_attempts: int,
    tags: Sequence[str],
    run_at: dt.datetime | None,
    metadata: object,
) -> None:
    if not _whole(priority) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidEnqueueOption(
            f"priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} "
            f"(1 urgent .. 4 batch is the usual scale), got {priority!r}"
        )
    if not _whole(max_attempts) or not 1 <= max_attempts <= 1000:
        raise InvalidEnqueueOption(f"max_attempts must be 1..1000, got {max_attempts!r}")
    if not isinstance(tags, list | tuple) or len(tags) > MAX_TAGS:
        raise InvalidEnqueueOption(f"tags must be a list of at most {MAX_TAGS} strings")
    if not all(isinstance(t, str) and 0 < len(t) <= 200 for t in tags):
        raise InvalidEnqueueOption("each tag must be a non-empty string of at most 200 chars")
    if run_at is not None and (not isinstance(run_at, dt.datetime) or run_at.tzinfo is None):
        raise InvalidEnqueueOption("run_at must be a timezone-aware datetime")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidEnqueueOption(f"metadata must be a dict, got {type(metadata).__name__}")


_MANY_COLUMNS = (
    "kinds",
    "queues",
    "args",
    "states",
    "priorities",
    "max_attempts",
    "run_ats",
    "metadata",
    "tags",
)


def _append_row(columns: dict[str, list[Any]], template: _Insert, args: str) -> None:
    columns["kinds"].append(template.kind)
    columns["queues"].append(template.queue)
    columns["args"].append(args)
    columns["states"].append(template.state)
    columns["priorities"].append(template.priority)
    columns["max_attempts"].append(template.max_attempts)
    columns["run_ats"].append(template.run_at)
    columns["metadata"].append(template.metadata)
    columns["tags"].append(template.tags_json)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def enqueue(args: Any, **options: Any) -> JobSnapshot:
    """Enqueue one job in the current transaction. See `Client.enqueue`."""
    return Client(options.pop("using", None)).enqueue(args, **options)


def enqueue_many(jobs: Iterable[Any], **options: Any) -> list[int]:
    """Enqueue many jobs in one round trip. See `Client.enqueue_many`."""
    return Client(options.pop("using", None)).enqueue_many(jobs, **options)


async def aenqueue(args: Any, **options: Any) -> JobSnapshot:
    return await sync_to_async(enqueue)(args, **options)


async def aenqueue_many(jobs: Iterable[Any], **options: Any) -> list[int]:
    return await sync_to_async(enqueue_many)(jobs, **options)
