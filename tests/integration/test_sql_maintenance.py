"""The named statements of `awa_django/storage/sql/maintenance.py` (promote, rescue, prune,
leadership, autovacuum check) run against real PostgreSQL, and the plans of the
maintenance scans on a 20,000-row table.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection
from django.db.models import F
from django.utils import timezone

from awa_django.storage.models import (
    ActiveLease,
    Job,
    LeaderLease,
)
from awa_django.storage.sql import maintenance as maintenance_sql
from tests.integration.sql_helpers import (
    AGO,
    JobFactory,
    Q,
    big_table,
    claim,
    explain,
    jobs,
    run,
    running,
    snapshot,
    transaction_now,
)

pytestmark = pytest.mark.django_db
__all__ = ["big_table"]  # the fixture, imported for the plan tests


# -- job_promote_due ----------------------------------------------------------------------
def test_job_promote_due_moves_due_deferred_jobs_and_counts_per_queue() -> None:
    past = timezone.now() - AGO
    due = [
        JobFactory(state="scheduled", run_at=past),
        JobFactory(state="retryable", run_at=past, attempt=2, errors=[{"error": "e"}]),
        JobFactory(state="scheduled", run_at=past, queue="core-sql-2"),
    ]
    future = JobFactory(state="scheduled", run_at=timezone.now() + AGO)
    parked = JobFactory(state="waiting_external", run_at=past)
    assert run(maintenance_sql.job_promote_due, limit=100) == 3
    for job in due:
        promoted = snapshot(job.id)
        assert (promoted["state"], promoted["run_at"]) == ("available", transaction_now())
    assert snapshot(due[1].id)["attempt"] == 2 and snapshot(due[1].id)["errors"] == [{"error": "e"}]
    assert snapshot(future.id)["state"] == "scheduled"
    assert snapshot(parked.id)["state"] == "waiting_external"


def test_job_promote_due_respects_the_limit_oldest_first() -> None:
    past = timezone.now() - AGO
    oldest = JobFactory(state="scheduled", run_at=past - dt.timedelta(hours=1))
    JobFactory(state="scheduled", run_at=past)
    assert run(maintenance_sql.job_promote_due, limit=1) == 1
    assert snapshot(oldest.id)["state"] == "available"


# -- rescue -------------------------------------------------------------------------------
def test_job_rescue_stale_heartbeat_retries_with_backoff_and_an_error() -> None:
    stale = running(progress={"p": 1})
    fresh = running()
    ActiveLease.objects.filter(job_id=stale.id).update(heartbeat_at=timezone.now() - AGO)
    result = jobs(
        maintenance_sql.job_rescue_stale_heartbeat,
        limit=100,
        staleness_seconds=90,
        message="heartbeat stale: worker presumed dead",
    )
    assert [r.id for r in result] == [stale.id]
    (rescued,) = result
    assert (rescued.state, rescued.attempt, rescued.progress) == ("retryable", 1, {"p": 1})
    assert rescued.finalized_at is not None
    assert 2.0 <= (rescued.run_at - rescued.finalized_at).total_seconds() < 2.5
    assert [(e["error"], e["attempt"]) for e in rescued.errors] == [
        ("heartbeat stale: worker presumed dead", 1)
    ]
    assert set(ActiveLease.objects.values_list("job_id", flat=True)) == {fresh.id}
    assert snapshot(fresh.id)["state"] == "running"


def test_job_rescue_stale_heartbeat_takes_a_lease_less_job_once_its_claim_is_stale() -> None:
    """A worker that died before its first heartbeat left no lease: the claim's
    attempted_at stands for the heartbeat (decision 030)."""
    dead, young = running(lease_now=False), running(lease_now=False)
    other_attempts = running(lease_now=False)
    Job.objects.filter(id__in=[dead.id, other_attempts.id]).update(
        attempted_at=timezone.now() - AGO
    )
    # Their deadlines come with their leases: the deadline rescue does not take them.
    assert jobs(maintenance_sql.job_rescue_deadline, limit=10, message="m") == []
    # A lease of another attempt of the job does not count as this attempt's.
    ActiveLease.objects.create(
        job_id=other_attempts.id, run_lease=other_attempts.run_lease - 1, queue=Q, worker_id="x"
    )
    result = jobs(
        maintenance_sql.job_rescue_stale_heartbeat, limit=10, staleness_seconds=90, message="m"
    )
    assert sorted(r.id for r in result) == sorted([dead.id, other_attempts.id])
    assert {r.state for r in result} == {"retryable"}
    assert snapshot(young.id)["state"] == "running"


def test_job_rescue_stale_heartbeat_fails_a_job_whose_last_attempt_it_rescues() -> None:
    row = running(attempt=9, max_attempts=10)  # the claim made it attempt 10 of 10
    ActiveLease.objects.filter(job_id=row.id).update(heartbeat_at=timezone.now() - AGO)
    (rescued,) = jobs(
        maintenance_sql.job_rescue_stale_heartbeat, limit=10, staleness_seconds=1, message="m"
    )
    assert (rescued.state, rescued.attempt, rescued.run_at) == ("failed", 10, row.run_at)
    assert rescued.finalized_at == transaction_now()
    assert [(e["error"], e["attempt"], e["terminal"]) for e in rescued.errors] == [("m", 10, True)]


def test_job_rescue_stale_heartbeat_leaves_an_orphan_lease_and_its_job_alone() -> None:
    row = running()
    # The job moved on (a newer run_lease) but an old lease row lingers.
    Job.objects.filter(id=row.id).update(run_lease=F("run_lease") + 1)
    ActiveLease.objects.filter(job_id=row.id).update(heartbeat_at=timezone.now() - AGO)
    before = snapshot(row.id)
    assert (
        jobs(maintenance_sql.job_rescue_stale_heartbeat, limit=10, staleness_seconds=1, message="m")
        == []
    )
    assert snapshot(row.id) == before
    assert ActiveLease.objects.filter(job_id=row.id).exists()  # lease_delete_orphans' job


def test_job_rescue_deadline_rescues_passed_deadlines_only() -> None:
    JobFactory.create_batch(2)
    late, on_time = claim(deadline=60)
    ActiveLease.objects.filter(job_id=late.id).update(deadline_at=timezone.now() - AGO)
    (rescued,) = jobs(
        maintenance_sql.job_rescue_deadline, limit=10, message="hard deadline exceeded"
    )
    assert (rescued.id, rescued.state) == (late.id, "retryable")
    assert rescued.errors[0]["error"] == "hard deadline exceeded"
    assert snapshot(on_time.id)["state"] == "running"


def parked(attempt: int, max_attempts: int, timeout: dt.timedelta) -> Job:
    return JobFactory(
        state="waiting_external",
        attempt=attempt,
        max_attempts=max_attempts,
        run_lease=attempt,
        callback_id=uuid.uuid4(),
        callback_timeout_at=timezone.now() + timeout,
    )


def test_job_rescue_expired_callback_retries_or_fails_when_exhausted() -> None:
    retry = parked(1, 3, -AGO)
    exhausted = parked(3, 3, -AGO)
    waiting = parked(1, 3, AGO)
    message = "callback timed out"
    expired = jobs(maintenance_sql.job_rescue_expired_callback, limit=10, message=message)
    result = {r.id: r for r in expired}
    assert set(result) == {retry.id, exhausted.id}
    r = result[retry.id]
    assert (r.state, r.callback_id, r.callback_timeout_at) == ("retryable", None, None)
    assert r.finalized_at is not None
    assert 2.0 <= (r.run_at - r.finalized_at).total_seconds() < 2.5
    assert r.errors == [{"error": "callback timed out", "attempt": 1, "at": r.errors[0]["at"]}]
    f = result[exhausted.id]
    assert (f.state, f.callback_id, f.run_at) == ("failed", None, exhausted.run_at)
    assert f.errors[0]["terminal"] is True and f.errors[0]["error"] == "callback timed out"
    assert snapshot(waiting.id)["state"] == "waiting_external"


# -- job_prune_terminal -------------------------------------------------------------------
def test_job_prune_terminal_deletes_by_state_specific_retention() -> None:
    now = timezone.now()
    old_completed = JobFactory(state="completed", finalized_at=now - dt.timedelta(hours=2))
    young_completed = JobFactory(state="completed", finalized_at=now - dt.timedelta(minutes=1))
    old_failed = JobFactory(state="failed", finalized_at=now - dt.timedelta(hours=6))
    young_failed = JobFactory(state="failed", finalized_at=now - dt.timedelta(hours=2))
    old_cancelled = JobFactory(state="cancelled", finalized_at=now - dt.timedelta(hours=6))
    old_retryable = JobFactory(state="retryable", finalized_at=now - dt.timedelta(days=9))
    run(
        maintenance_sql.job_prune_terminal,
        completed_seconds=3600,
        failed_seconds=4 * 3600,
        limit=100,
    )
    left = set(Job.objects.values_list("id", flat=True))
    assert left == {young_completed.id, young_failed.id, old_retryable.id}
    assert not left & {old_completed.id, old_failed.id, old_cancelled.id}


def test_job_prune_terminal_deletes_at_most_limit_rows() -> None:
    JobFactory.create_batch(
        5, state="completed", finalized_at=timezone.now() - dt.timedelta(days=3)
    )
    JobFactory.create_batch(5, state="failed", finalized_at=timezone.now() - dt.timedelta(days=9))
    deleted = run(
        maintenance_sql.job_prune_terminal, completed_seconds=60, failed_seconds=60, limit=3
    )
    assert deleted == 3
    assert Job.objects.count() == 7


# -- leadership ---------------------------------------------------------------------------
def test_leader_acquire_or_renew_and_leader_release() -> None:
    def acquire(holder: str, ttl: float = 30) -> bool:
        return run(
            maintenance_sql.leader_acquire_or_renew, name="core-m", holder=holder, ttl_seconds=ttl
        )

    def expires_in() -> dt.timedelta:
        return LeaderLease.objects.get(name="core-m").expires_at - transaction_now()

    assert acquire("a") is True
    assert LeaderLease.objects.get(name="core-m").holder == "a"
    assert expires_in() == dt.timedelta(seconds=30)
    assert acquire("b") is False  # a leads and its lease is live
    assert acquire("a", ttl=60) is True and expires_in() == dt.timedelta(seconds=60)
    run(maintenance_sql.leader_release, name="core-m", holder="b")  # not b's to release
    assert LeaderLease.objects.get(name="core-m").holder == "a"
    LeaderLease.objects.filter(name="core-m").update(expires_at=timezone.now() - AGO)
    assert acquire("b") is True  # expired: b takes over
    assert LeaderLease.objects.get(name="core-m").holder == "b"
    run(maintenance_sql.leader_release, name="core-m", holder="b")
    assert not LeaderLease.objects.filter(name="core-m").exists()


# -- tables_autovacuum_skips ----------------------------------------------------------------
def test_tables_autovacuum_skips_lists_the_tables_autovacuum_will_not_vacuum() -> None:
    """On a server with autovacuum on, only a table that opts out is listed; with it off
    (as on the CI machine), every table asked about is."""
    tables = ["awa_jobs_hot", "awa_active_leases"]
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        server_skips = cursor.fetchone()[0] == "off"

    def skipped() -> set[str]:
        return {row.table for row in run(maintenance_sql.tables_autovacuum_skips, tables=tables)}

    assert skipped() == (set(tables) if server_skips else set())
    with connection.cursor() as cursor:  # rolled back with the test's transaction
        cursor.execute("ALTER TABLE awa_jobs_hot SET (autovacuum_enabled = false)")
    assert "awa_jobs_hot" in skipped()


# -- plans on a realistic table -----------------------------------------------------------
@pytest.mark.usefixtures("big_table")
def test_job_promote_due_plan_uses_the_promote_index() -> None:
    plan = explain(maintenance_sql.job_promote_due, limit=4096)
    assert "awa_jobs_promote_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan


@pytest.mark.usefixtures("big_table")
def test_job_rescue_expired_callback_plan_uses_the_timeout_index() -> None:
    plan = explain(maintenance_sql.job_rescue_expired_callback, limit=500, message="m")
    assert "awa_jobs_cb_timeout_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan


@pytest.mark.usefixtures("big_table")
def test_job_prune_terminal_plan_uses_the_finalized_index_range() -> None:
    plan = explain(
        maintenance_sql.job_prune_terminal,
        completed_seconds=86400,
        failed_seconds=3 * 86400,
        limit=1000,
    )
    assert "awa_jobs_finalized_idx" in plan, plan
    # The retention bound must be an index condition, not a filter over every terminal row.
    assert "Index Cond: (finalized_at <" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan
