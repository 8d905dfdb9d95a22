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
    return jobs_sql.job_insert_one(**row.columns(args, django_task)).run(using)


def insert_many(using: str, rows: BulkRows, *, skip: bool) -> list[int | None]:
    """Write planned jobs in one statement; ids in input order (None: skipped, held key)."""
    if rows.unique_keys is not None:
        return unique.insert_many(using, rows, skip=skip)
    if not rows.kinds:
        return []
    ids = jobs_sql.job_insert_many(**rows.columns()).run(using)
    return cast(list[int | None], ids)
