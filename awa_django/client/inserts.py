"""The writes of enqueue: planned rows (rows.py) to the named insert statements, one row
or many, the unique ones through unique.py (ON CONFLICT on the key's index)."""

from __future__ import annotations

from typing import cast

from awa_django.client import unique
from awa_django.client.rows import BulkRows, JobTemplate
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import jobs as jobs_sql


def insert_one(using: str, row: JobTemplate, args: str, django_task: str | None) -> JobSnapshot:
    """Write one planned job (its args already JSON) in the caller's transaction."""
    if row.unique is not None:
        return unique.insert_one(using, row, args, django_task)
    query = jobs_sql.job_insert_one(
        kind=row.kind,
        queue=row.queue,
        args=args,
        state=row.state,
        priority=row.priority,
        max_attempts=row.max_attempts,
        run_at=row.run_at,
        metadata=row.metadata,
        tags=row.tags,
        django_task=django_task,
        channels=row.channels,
    )
    return query.run(using)


def insert_many(using: str, rows: BulkRows, *, skip: bool) -> list[int | None]:
    """Write planned jobs in one statement; ids in input order (None: skipped, held key)."""
    if rows.unique_keys is not None:
        return unique.insert_many(using, rows, skip=skip)
    if not rows.kinds:
        return []
    query = jobs_sql.job_insert_many(
        kinds=rows.kinds,
        queues=rows.queues,
        args=rows.args,
        states=rows.states,
        priorities=rows.priorities,
        max_attempts=rows.max_attempts,
        run_ats=rows.run_ats,
        metadata=rows.metadata,
        tags=rows.tags,
        channels=rows.channels,
    )
    return cast(list[int | None], query.run(using))
