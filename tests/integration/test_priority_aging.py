"""Priority aging (decision 018) on real PostgreSQL: the leader's `Ager.run_once()` lifts
available jobs one level per interval waited, up to the top (1), keeps the enqueued
priority in `original_priority`, never waits for a row a worker holds, and promotion and
retry put the enqueued priority back.

Transactional tests: the runtime commits on its own connections, with the database's
clock. `run_at` is set in the past to stand for the time waited.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from django.utils import timezone

from awa_django.client import Client
from awa_django.conf import AGING_TOP_PRIORITY
from awa_django.storage.models import Job
from awa_django.storage.sql import aging as aging_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.worker.database import connection_kwargs
from awa_django.worker.maintenance import ager
from awa_django.worker.maintenance.ager import Ager
from tests.factories import JobFactory as BaseJobFactory
from tests.integration.sql_helpers import big_table, explain
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

Q = "core-aging"
INTERVAL = 60.0
__all__ = ["big_table"]  # the fixture, imported for the plan test


class JobFactory(BaseJobFactory):
    kind = "core_aging"
    queue = Q
    priority = 4


def waited(intervals: float) -> dt.datetime:
    """A run_at that has waited `intervals` aging intervals by now."""
    return timezone.now() - dt.timedelta(seconds=INTERVAL * intervals)


def age(queue: str = Q) -> int:
    return with_db(lambda db: Ager(db, queue, INTERVAL).run_once())


def priorities(*jobs: Job) -> list[tuple[int, int | None]]:
    for job in jobs:
        job.refresh_from_db()
    return [(job.priority, job.original_priority) for job in jobs]


def test_a_waiting_job_gains_one_level_per_interval_waited() -> None:
    fresh, one, two_and_a_half = (JobFactory(run_at=waited(n)) for n in (0.5, 1.1, 2.5))
    assert age() == 2
    assert priorities(fresh, one, two_and_a_half) == [(4, None), (3, 4), (2, 4)]


def test_aging_stops_at_the_top_and_never_touches_jobs_already_there() -> None:
    old = JobFactory(run_at=waited(10))
    urgent = JobFactory(priority=1, run_at=waited(10))
    django_urgent = JobFactory(priority=-5, run_at=waited(10))  # a Django task priority 7
    age()
    assert priorities(old, urgent, django_urgent) == [
        (AGING_TOP_PRIORITY, 4),
        (1, None),
        (-5, None),
    ]


def test_a_second_pass_adds_nothing_until_another_interval_has_passed() -> None:
    job = JobFactory(run_at=waited(1.5))
    assert age() == 1
    assert age() == 0  # counted from the enqueued priority, not decremented per pass
    assert priorities(job) == [(3, 4)]
    Job.objects.filter(pk=job.pk).update(run_at=waited(2.5))
    assert age() == 1
    assert priorities(job) == [(2, 4)]


def test_only_available_jobs_of_the_queue_age() -> None:
    others = [
        JobFactory(state=state, run_at=waited(3))
        for state in ("scheduled", "retryable", "running", "waiting_external", "failed")
    ]
    elsewhere = JobFactory(queue="core-aging-other", run_at=waited(3))
    assert age() == 0
    assert priorities(*others, elsewhere) == [(4, None)] * 6


def test_an_aged_job_is_claimed_before_newer_jobs_of_its_new_level() -> None:
    newer_urgent = JobFactory(priority=1, run_at=waited(0.1))
    batch = JobFactory(run_at=waited(3.5))
    age()
    query = jobs_sql.job_claim_many(
        lease_now=True, queue=Q, limit=1, worker_id="w", deadline_seconds=0
    )
    (claimed,) = query.run("default")
    assert claimed.id == batch.id
    assert (claimed.priority, claimed.original_priority) == (1, 4)
    assert priorities(newer_urgent) == [(1, None)]


def test_aging_skips_a_row_a_worker_holds_instead_of_waiting() -> None:
    held, free = JobFactory(run_at=waited(2)), JobFactory(run_at=waited(2))
    with (
        psycopg.connect(**connection_kwargs("default", "awa-test-lock")) as other,
        other.transaction(),
    ):
        other.execute("SELECT 1 FROM awa_jobs_hot WHERE id = %s FOR UPDATE", [held.pk])
        assert age() == 1
    assert priorities(held, free) == [(4, None), (2, 4)]


def test_one_pass_ages_a_bounded_number_of_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ager, "BATCH", 2)
    monkeypatch.setattr(ager, "MAX_BATCHES", 2)
    JobFactory.create_batch(6, run_at=waited(2))
    assert age() == 4
    assert Job.objects.filter(queue=Q, priority=2).count() == 4
    assert age() == 2


def test_a_flooded_level_does_not_hide_the_old_rows_of_another() -> None:
    JobFactory.create_batch(50, priority=2, run_at=waited(0.1))  # fresh, not due
    old = JobFactory(run_at=waited(1.5))
    assert age() == 1
    assert priorities(old) == [(3, 4)]


def test_promotion_gives_an_aged_job_its_enqueued_priority_back() -> None:
    job = JobFactory(run_at=waited(3))
    age()
    Job.objects.filter(pk=job.pk).update(state="retryable", run_at=waited(0.1))
    with_db(lambda db: db.run(maintenance_sql.job_promote_due(limit=10)))
    job.refresh_from_db()
    assert (job.state, job.priority, job.original_priority) == ("available", 4, None)


def test_an_operator_retry_gives_an_aged_job_its_enqueued_priority_back() -> None:
    job = JobFactory(run_at=waited(3))
    age()
    Job.objects.filter(pk=job.pk).update(state="failed", finalized_at=timezone.now())
    (retried,) = Client().retry_many([job.pk])
    assert (retried.priority, retried.original_priority) == (4, None)


def test_job_age_priority_plan_walks_the_dispatch_index(big_table: Any) -> None:
    plan = explain(aging_sql.job_age_priority, queue="q3", interval=INTERVAL, limit=1000)
    assert "awa_jobs_dispatch_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan
    # Per level, the waited bound is an index condition, not a filter over the level.
    conditions = [line for line in plan.splitlines() if "Index Cond" in line]
    assert any("priority = l" in c and "run_at <= (now() -" in c for c in conditions), plan
    assert "awa_jobs_hot_pkey" in plan, plan  # the UPDATE finds its rows by id
