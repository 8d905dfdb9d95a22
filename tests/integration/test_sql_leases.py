"""The named statements of `awa_django/storage/sql/leases.py` (lease epochs, heartbeats,
lease clean-up) run against real PostgreSQL.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import (
    ActiveLease,
    Job,
    LeaseEpoch,
)
from awa_django.storage.sql import leases as leases_sql
from awa_django.storage.sql.fragments import (
    EPOCH_SPACE,
    LAST_EPOCH,
    LEASE_EPOCH_SETTING,
)
from tests.integration.sql_helpers import (
    AGO,
    JobFactory,
    Q,
    claim,
    run,
    running,
    transaction_now,
)

pytestmark = pytest.mark.django_db


# -- lease_epoch_take ---------------------------------------------------------------------
def test_lease_epoch_take_gives_a_later_epoch_each_time_kept_in_the_session() -> None:
    first = run(leases_sql.lease_epoch_take)
    second = run(leases_sql.lease_epoch_take)
    assert first is not None and second is not None and 0 < first < second
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT current_setting('{LEASE_EPOCH_SETTING}')")
        assert cursor.fetchone() == (str(second),)
        # The claim under it: run_lease from the epoch up, and no flush wait at its commit.
        job = JobFactory(run_lease=4)
        (row,) = claim()
        assert row.id == job.id and row.run_lease == second * EPOCH_SPACE
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("off",)


def test_lease_epoch_take_restores_its_row_and_stops_at_the_last_epoch() -> None:
    LeaseEpoch.objects.all().delete()  # what `flush` leaves (with no job either)
    assert run(leases_sql.lease_epoch_take) == 1
    LeaseEpoch.objects.update(epoch=LAST_EPOCH)
    assert run(leases_sql.lease_epoch_take) is None
    assert LeaseEpoch.objects.get().epoch == LAST_EPOCH


# -- lease_heartbeat_many -----------------------------------------------------------------
def test_lease_heartbeat_many_refreshes_owned_leases_and_reports_them() -> None:
    a, b = running(), running()
    ActiveLease.objects.update(heartbeat_at=timezone.now() - AGO)
    owned = beat([a, b], leases=[a.run_lease, 77])
    assert owned == {(a.id, a.run_lease)}
    beats = dict(ActiveLease.objects.values_list("job_id", "heartbeat_at"))
    assert beats[a.id] == transaction_now()
    assert beats[b.id] < transaction_now() - dt.timedelta(days=1)


def test_lease_heartbeat_many_is_one_statement(django_assert_num_queries: Any) -> None:
    claimed = [running() for _ in range(30)]
    with django_assert_num_queries(1):
        owned = beat(claimed)
    assert len(owned) == 30


def beat(
    rows: list[JobSnapshot], *, leases: list[int] | None = None, deadline: float = 0.0
) -> set[tuple[int, int]]:
    """One heartbeat for `rows` (their own run_leases unless `leases` says otherwise)."""
    return run(
        leases_sql.lease_heartbeat_many,
        ids=[r.id for r in rows],
        leases=leases or [r.run_lease for r in rows],
        deadlines=[deadline] * len(rows),
    )


def test_a_claim_without_leases_writes_none_and_the_first_beat_writes_them() -> None:
    first, second = running(lease_now=False), running(lease_now=False)
    assert not ActiveLease.objects.exists()
    assert beat([first, second], deadline=60) == {
        (first.id, first.run_lease),
        (second.id, second.run_lease),
    }
    lease = ActiveLease.objects.get(job_id=first.id)
    assert (lease.run_lease, lease.queue, lease.worker_id) == (first.run_lease, Q, "w1")
    assert lease.claimed_at == first.attempted_at and lease.heartbeat_at == transaction_now()
    assert first.attempted_at is not None
    assert lease.deadline_at == first.attempted_at + dt.timedelta(seconds=60)
    # Later beats move the heartbeat only.
    ActiveLease.objects.update(heartbeat_at=timezone.now() - AGO)
    assert beat([first], deadline=5) == {(first.id, first.run_lease)}
    again = ActiveLease.objects.get(job_id=first.id)
    assert (again.heartbeat_at, again.deadline_at) == (transaction_now(), lease.deadline_at)


def test_a_beat_takes_deadlines_of_any_number_type() -> None:
    """Settings give a queue's deadline as written: 60 is an int, the default 300.0 a
    float, and one beat covers jobs of both."""
    short, long = running(lease_now=False), running(lease_now=False)
    owned = run(
        leases_sql.lease_heartbeat_many,
        ids=[short.id, long.id],
        leases=[short.run_lease, long.run_lease],
        deadlines=[60, 300.0],
    )
    assert len(owned) == 2
    deadlines = dict(ActiveLease.objects.values_list("job_id", "deadline_at"))
    assert short.attempted_at is not None and long.attempted_at is not None
    assert deadlines[short.id] == short.attempted_at + dt.timedelta(seconds=60)
    assert deadlines[long.id] == long.attempted_at + dt.timedelta(seconds=300)


def test_a_beat_adopts_the_unowned_lease_resume_external_wrote() -> None:
    row = running(lease_now=False)
    ActiveLease.objects.create(job_id=row.id, run_lease=row.run_lease, queue=Q, worker_id="")
    assert beat([row], deadline=60) == {(row.id, row.run_lease)}
    lease = ActiveLease.objects.get(job_id=row.id)
    assert (lease.worker_id, lease.claimed_at) == ("w1", row.attempted_at)
    assert lease.deadline_at is None  # the resume's: a resumed attempt runs without one


def test_the_first_beat_of_a_sequential_wait_writes_no_deadline() -> None:
    row = running(lease_now=False)
    Job.objects.filter(id=row.id).update(state="waiting_external")
    assert beat([row], deadline=60) == {(row.id, row.run_lease)}
    assert ActiveLease.objects.get(job_id=row.id).deadline_at is None


def test_a_beat_takes_over_an_earlier_attempts_lease_but_never_a_later_ones() -> None:
    row = running(lease_now=False)
    ActiveLease.objects.create(
        job_id=row.id, run_lease=row.run_lease - 1, queue=Q, worker_id="gone"
    )
    assert beat([row]) == {(row.id, row.run_lease)}
    lease = ActiveLease.objects.get(job_id=row.id)
    assert (lease.run_lease, lease.worker_id) == (row.run_lease, "w1")
    # A later attempt's lease (this attempt's beat came late) stays as it is.
    ActiveLease.objects.filter(job_id=row.id).update(run_lease=row.run_lease + 1, worker_id="new")
    assert beat([row]) == set()
    lease = ActiveLease.objects.get(job_id=row.id)
    assert (lease.run_lease, lease.worker_id) == (row.run_lease + 1, "new")


def test_a_beat_for_an_attempt_that_ended_writes_no_lease() -> None:
    ended, rescued = running(lease_now=False), running(lease_now=False)
    Job.objects.filter(id=ended.id).update(state="completed")
    Job.objects.filter(id=rescued.id).update(state="retryable")
    assert beat([ended, rescued]) == set()
    assert not ActiveLease.objects.exists()


def test_lease_delete_for_jobs_drops_leases_of_finished_jobs_only() -> None:
    finished, live = running(), running()
    # A lease that outlived its job (a cancel whose snapshot missed a concurrent claim).
    Job.objects.filter(id=finished.id).update(state="cancelled")
    run(leases_sql.lease_delete_for_jobs, ids=[finished.id, live.id])
    assert list(ActiveLease.objects.values_list("job_id", flat=True)) == [live.id]


def test_lease_delete_orphans_drops_stale_leases_whose_job_no_longer_runs_under_them() -> None:
    orphan, stale_but_running, fresh_orphan = running(), running(), running()
    Job.objects.filter(id__in=[orphan.id, fresh_orphan.id]).update(state="waiting_external")
    ActiveLease.objects.filter(job_id__in=[orphan.id, stale_but_running.id]).update(
        heartbeat_at=timezone.now() - AGO
    )
    run(leases_sql.lease_delete_orphans, staleness_seconds=60)
    # The running job's stale lease is rescue's business, a fresh lease is left alone.
    assert sorted(ActiveLease.objects.values_list("job_id", flat=True)) == sorted(
        [stale_but_running.id, fresh_orphan.id]
    )


def test_lease_delete_ended_drops_only_the_leases_of_attempts_that_ended() -> None:
    """Decision 033: a late lease (its job completed under it) goes; the lease of an
    attempt still running, and a lease of the job's later attempt, stay."""
    ended, still_running, reclaimed = running(), running(), running()
    Job.objects.filter(id=ended.id).update(state="completed")
    ActiveLease.objects.filter(job_id=reclaimed.id).update(run_lease=reclaimed.run_lease + 1)
    Job.objects.filter(id=reclaimed.id).update(run_lease=reclaimed.run_lease + 1)
    removed = run(
        leases_sql.lease_delete_ended,
        ids=[ended.id, still_running.id, reclaimed.id],
        leases=[ended.run_lease, still_running.run_lease, reclaimed.run_lease],
    )
    assert removed == 1
    assert sorted(ActiveLease.objects.values_list("job_id", flat=True)) == sorted(
        [still_running.id, reclaimed.id]
    )
