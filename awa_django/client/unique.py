"""Unique jobs on the Client's side: writing rows that carry a key, turning a held key
into `UniqueConflict`, and recomputing a key for `cancel_by_unique_key`.

A held key never raises in the database: the inserts use ON CONFLICT DO NOTHING on the
partial unique index, so the caller's transaction stays usable without a savepoint. Only
`enqueue_many`'s all-or-nothing mode opens one (decision 012), to undo the rows it wrote
before finding a held key.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from django.db import transaction

from awa_django.codec import encode_args_json
from awa_django.conf import validate_queue_name
from awa_django.exceptions import InvalidEnqueueOption, UniqueConflict
from awa_django.execution.rows import BulkRows, JobTemplate
from awa_django.options import check_kind
from awa_django.registry import kind_for, validate_args_type
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import unique as unique_sql
from awa_django.unique import unique_key


def insert_one(using: str, row: JobTemplate, args: str, django_task: str | None) -> JobSnapshot:
    """Write one unique job; UniqueConflict (nothing written) when its key is held."""
    assert row.unique is not None
    key = cast(bytes, row.unique_key(args))
    inserted = jobs_sql.job_insert_one_unique(
        **row.columns(args, django_task), unique_key=key, unique_states=row.unique.states_mask
    ).run(using)
    if inserted is None:
        holder = unique_sql.job_unique_holder(unique_key=key).run(using)
        raise _conflict(f"a {row.kind} job", holder)
    return inserted


def insert_many(using: str, rows: BulkRows, *, skip: bool) -> list[int | None]:
    """Write `rows` (some with a key): per input position, the id or None (skipped). Unless
    `skip`, the first held key raises UniqueConflict and none of the rows is kept."""
    query = unique_sql.job_insert_many_unique(
        **rows.columns(),
        unique_keys=cast(list[bytes | None], rows.unique_keys),
        unique_states=cast(list[str | None], rows.unique_states),
    )
    if skip:
        return query.run(using)
    # A savepoint inside the caller's transaction (its own one outside): raising in it
    # undoes this call's rows and their NOTIFY, and leaves the caller's work alone.
    with transaction.atomic(using=using):
        ids = query.run(using)
        if None in ids:
            raise _first_conflict(using, rows, ids)
    return ids


def _first_conflict(using: str, rows: BulkRows, ids: list[int | None]) -> UniqueConflict:
    position = ids.index(None)
    key = cast(list[bytes], rows.unique_keys)[position]
    holder = unique_sql.job_unique_holder(unique_key=key).run(using)
    # A holder written by this very call is rolled back with it: no job to name.
    return _conflict(
        f"the {rows.kind_at(position)} job at position {position}",
        None if holder in ids else holder,
    )


def _conflict(what: str, holder: int | None) -> UniqueConflict:
    by = f"job {holder}" if holder is not None else "another job of this call or one since gone"
    return UniqueConflict(f"{what} was not enqueued: its unique key is held by {by}", job_id=holder)


def cancel_oldest_live(
    using: str, key: bytes, cancel: Callable[[int], JobSnapshot | None]
) -> JobSnapshot | None:
    """Cancel (through the Client's `cancel`) the oldest live job with `key`. A job found
    may end before the cancel reaches it; then the next one is tried (an ended job is
    never found again, so this stops)."""
    tried: set[int] = set()
    while True:
        job_id = unique_sql.job_unique_oldest_live(unique_key=key).run(using)
        if job_id is None or job_id in tried:
            return None
        if (row := cancel(job_id)) is not None:
            return row
        tried.add(job_id)


def key_of(kind: type | str, *, args: Any, queue: str | None, period_bucket: int | None) -> bytes:
    """The key enqueue gave a job of `kind` (an args dataclass or a kind string) whose
    UniqueOpts covered exactly the parts passed here (not None)."""
    if isinstance(kind, str):
        kind_name = check_kind(kind)
    else:
        kind_name = check_kind(kind_for(validate_args_type(kind)))
    if queue is not None:
        validate_queue_name(queue)
    if period_bucket is not None and (
        isinstance(period_bucket, bool) or not isinstance(period_bucket, int)
    ):
        raise InvalidEnqueueOption(f"period_bucket must be an int, got {period_bucket!r:.60}")
    stored = None if args is None else json.loads(encode_args_json(args, what="args"))
    return unique_key(kind_name, queue=queue, args=stored, period_bucket=period_bucket)
