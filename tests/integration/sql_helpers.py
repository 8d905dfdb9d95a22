"""Shared helpers of the `test_sql_*.py` statement tests: a factory for due jobs, a
runner for a statement in the test's transaction, the claim and finalization shortcuts,
the unique-key fixtures, and the 20,000-row table and EXPLAIN helper for plan tests.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (AGO)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import factory
import pytest
from django.db import connection
from django.utils import timezone

from awa_django.execution.outcomes import Transition
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import Job
from awa_django.storage.query import Query
from awa_django.storage.sql import jobs as jobs_sql
from tests.factories import JobFactory as BaseJobFactory

T = TypeVar("T")

Q = "core-sql"
AGO = dt.timedelta(days=2)


class JobFactory(BaseJobFactory):
    kind = "core_sql"
    queue = Q
    # The model's db_default is statement_timestamp(), later than this transaction's now().
    run_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=1))


def run(statement: Callable[..., Query[T]], **params: Any) -> T:
    """Build the statement's query from `params` and run it in the test's transaction."""
    return statement(**params).run("default")


def jobs(statement: Callable[..., Query[Any]], **params: Any) -> list[JobSnapshot]:
    """A statement's job rows as a list, whether it returns one row, none or many."""
    result = run(statement, **params)
    if result is None:
        return []
    return [result] if isinstance(result, JobSnapshot) else list(result)


def claim(
    queue: str = Q,
    limit: int = 10,
    worker: str = "w1",
    deadline: float = 0.0,
    *,
    lease_now: bool = True,
) -> list[JobSnapshot]:
    return jobs(
        jobs_sql.job_claim_many,
        queue=queue,
        limit=limit,
        worker_id=worker,
        deadline_seconds=deadline,
        lease_now=lease_now,
    )


def running(*, lease_now: bool = True, **fields: Any) -> JobSnapshot:
    """A job claimed by worker w1 (attempt 1, run_lease 1); its lease row written by the
    claim unless `lease_now` is False (a worker's first heartbeat writes it then)."""
    job = JobFactory(**fields)
    claimed = claim(queue=job.queue, limit=1000, lease_now=lease_now)
    (row,) = [r for r in claimed if r.id == job.id]
    return row


def set_state(
    row: JobSnapshot, transition: Transition, progress: str | None = None
) -> list[JobSnapshot]:
    return jobs(
        jobs_sql.job_set_state_if_running,
        id=row.id,
        run_lease=row.run_lease,
        move=transition.move,
        delay_seconds=transition.delay_seconds,
        error=transition.error,
        error_type=transition.error_type,
        terminal=transition.terminal,
        progress=progress,
        callback_id=transition.callback_id,
    )


def complete(
    pairs: list[tuple[int, int]], results: list[str | None] | None = None
) -> list[JobSnapshot]:
    return jobs(
        jobs_sql.job_complete_many,
        ids=[i for i, _ in pairs],
        leases=[lease for _, lease in pairs],
        results=results or [None] * len(pairs),
    )


def snapshot(job_id: int) -> Mapping[str, Any]:
    return Job.objects.filter(id=job_id).values().get()


def transaction_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


# -- unique jobs: job_insert_one_unique, job_insert_many_unique and the key lookups --------
KEY = bytes(range(16))
OTHER_KEY = bytes(range(1, 17))
DEFAULT_MASK = "11111000"  # scheduled, available, running, completed, retryable


def insert_unique(key: bytes = KEY, mask: str = DEFAULT_MASK, **fields: Any) -> JobSnapshot | None:
    params: dict[str, Any] = {
        "kind": "core_sql",
        "queue": Q,
        "args": "{}",
        "state": "available",
        "priority": 2,
        "max_attempts": 25,
        "run_at": None,
        "metadata": "{}",
        "tags": [],
        "django_task": None,
        "channels": [],
        "unique_key": key,
        "unique_states": mask,
    }
    return run(jobs_sql.job_insert_one_unique, **(params | fields))


# -- plans on a realistic table -----------------------------------------------------------
@pytest.fixture
def big_table() -> None:
    """20,000 jobs: mostly completed, 500 in each live state (running ones with a lease)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt,
                max_attempts, run_at, created_at, finalized_at, run_lease, errors, metadata,
                tags, attempted_by, callback_id, callback_timeout_at)
            SELECT 'core_explain', 'q' || (g % 10), '{}',
                   s.state, 1 + g % 4, 1, 25,
                   now() + (g % 600 - 300) * interval '1 second', now(),
                   CASE WHEN s.state IN ('completed', 'failed')
                        THEN now() - g * interval '1 second' END,
                   1, '[]', '{}', '{}', '{}',
                   CASE WHEN s.state = 'waiting_external' THEN gen_random_uuid() END,
                   CASE WHEN s.state = 'waiting_external'
                        THEN now() + (g % 600 - 300) * interval '1 second' END
            FROM generate_series(1, 20000) g,
                 LATERAL (SELECT CASE g % 40 WHEN 0 THEN 'available' WHEN 1 THEN 'scheduled'
                                  WHEN 2 THEN 'retryable' WHEN 3 THEN 'waiting_external'
                                  WHEN 4 THEN 'failed' WHEN 5 THEN 'running'
                                  ELSE 'completed' END AS state) s
            """
        )
        cursor.execute(
            """
            INSERT INTO awa_active_leases (job_id, run_lease, queue, worker_id, claimed_at,
                                           heartbeat_at)
            SELECT id, run_lease, queue, 'w', now(), now() FROM awa_jobs_hot
            WHERE state = 'running'
            """
        )
        cursor.execute("ANALYZE awa_jobs_hot")
        cursor.execute("ANALYZE awa_active_leases")


def explain(statement: Callable[..., Query[Any]], **params: Any) -> str:
    # Django's cursor binds client-side, so EXPLAIN sees literal values like a custom plan.
    query = statement(**params)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + query.statement.sql, query.params)
        return "\n".join(line for (line,) in cursor.fetchall())


def assert_finds_rows_by_id(plan: str) -> None:
    """The guarded rows are found through an index on id: the primary key, or the
    (state, id) index the planner may prefer for a `state = 'running'` guard (both are one
    probe per id; which one wins depends on the statistics), never by scanning the table."""
    assert re.search(
        r"Index Scan using awa_jobs_(hot_pkey|state_id_part_idx) on awa_jobs_hot", plan
    ), plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan
