"""The writes of enqueue: planned rows (rows.py) to the named insert statements, one row
or many, the unique ones through unique.py (ON CONFLICT on the key's index)."""

from __future__ import annotations

from typing import cast

from django.db import transaction

from awa_django.client import unique
from awa_django.execution.rows import BulkRows, JobTemplate
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import job_copy
from awa_django.storage.sql import jobs as jobs_sql


def insert_one(using: str, row: JobTemplate, args: str, django_task: str | None) -> JobSnapshot:
    """Write one planned job (its args already JSON) in the caller's transaction."""
    if row.unique is not None:
        job = unique.insert_one(using, row, args, django_task)
    else:
        job = jobs_sql.job_insert_one(**row.columns(args, django_task)).run(using)
    if row.carries_key:
        # Admitted after the insert (the AFTER INSERT trigger, decision 045): RETURNING
        # showed the row as inserted; its state may now be waiting_slot or scheduled.
        return jobs_sql.job_get(id=job.id).run(using) or job
    return job


# From this many rows on, enqueue_many writes with COPY: its two statements and the
# transaction it may need cost more round trips than the one INSERT, but each row then
# costs about half (decision 026; docs/performance.md has the crossover measured).
COPY_MIN_ROWS = 64


def insert_many(using: str, rows: BulkRows, *, skip: bool) -> list[int | None]:
    """Write planned jobs in the caller's transaction; ids in input order (None: skipped,
    held key)."""
    if rows.unique_keys is not None:
        return unique.insert_many(using, rows, skip=skip)
    if not rows.rows:
        return []
    if len(rows) >= COPY_MIN_ROWS:
        # Reserve and COPY must commit together: outside a transaction, this is one.
        with transaction.atomic(using=using, savepoint=False):
            ids = job_copy.job_copy_many(using, rows.rows, rows.channels)
    else:
        ids = jobs_sql.job_insert_many(**rows.columns()).run(using)
    return cast(list[int | None], ids)
