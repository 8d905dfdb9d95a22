"""Each named statement of `awa_django/storage/sql/*.py` (jobs, leases, maintenance, admin,
workers, cron, unique) run against real PostgreSQL (one test or more per statement, named
after it), the lease guard on every attempt write, and the plans of the hot statements on a
20,000-row table.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import factory
import pytest
from django.db import connection
from django.db.models import F, JSONField, Value
from django.utils import timezone

from awa_django.channels import role_channel_for
from awa_django.execution.outcomes import Transition
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import (
    ActiveLease,
    CronSchedule,
    Job,
    LeaderLease,
    LeaseEpoch,
    QueueState,
    WorkerInstance,
)
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement, job_copy
from awa_django.storage.sql import admin as admin_sql
from awa_django.storage.sql import cron as cron_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql import rollups as rollups_sql
from awa_django.storage.sql import unique as unique_sql
from awa_django.storage.sql import wakers as wakers_sql
from awa_django.storage.sql import workers as workers_sql
from awa_django.storage.sql.fragments import (
    EPOCH_SPACE,
    ERRORS_KEPT,
    LAST_EPOCH,
    LEASE_EPOCH_SETTING,
)
from tests.factories import JobFactory as BaseJobFactory
from tests.integration import test_observability

pytestmark = pytest.mark.django_db
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
        state=transition.state,
        run_at_mode=transition.run_at_mode,
        delay_seconds=transition.delay_seconds,
        attempt_refund=transition.attempt_refund,
        finalize=transition.finalize,
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


# -- job_insert_one / job_insert_many -------------------------------------------------------
def test_job_insert_one_returns_the_full_row() -> None:
    (row,) = jobs(
        jobs_sql.job_insert_one,
        kind="core_sql",
        queue=Q,
        args='{"a": 1}',
        state="available",
        priority=3,
        max_attempts=4,
        run_at=None,
        metadata='{"m": true}',
        tags=["t1", "t2"],
        django_task=None,
        channels=[],
    )
    assert (row.kind, row.queue, row.args, row.state, row.priority) == (
        "core_sql",
        Q,
        {"a": 1},
        "available",
        3,
    )
    assert (row.attempt, row.max_attempts, row.run_lease, row.errors) == (0, 4, 0, [])
    assert (row.metadata, row.tags, row.attempted_by, row.result) == (
        {"m": True},
        ["t1", "t2"],
        [],
        None,
    )
    assert row.run_at == row.created_at == transaction_now()


def test_job_insert_many_keeps_input_order_and_per_row_values() -> None:
    when = timezone.now() + dt.timedelta(hours=1)
    ids = run(
        jobs_sql.job_insert_many,
        kinds=["k_a", "k_b", "k_c"],
        queues=[Q, Q, "core-sql-2"],
        args=['{"n": 0}', '{"n": 1}', '{"n": 2}'],
        states=["available", "scheduled", "available"],
        priorities=[1, 2, 4],
        max_attempts=[1, 2, 3],
        run_ats=[None, when, None],
        metadata=["{}", '{"x": 1}', "{}"],
        tags=["[]", '["a", "b"]', '["c"]'],
        channels=[],
    )
    got = [snapshot(i) for i in ids]
    assert [g["args"]["n"] for g in got] == [0, 1, 2]
    assert [(g["kind"], g["state"], g["priority"], g["max_attempts"]) for g in got] == [
        ("k_a", "available", 1, 1),
        ("k_b", "scheduled", 2, 2),
        ("k_c", "available", 4, 3),
    ]
    assert [g["tags"] for g in got] == [[], ["a", "b"], ["c"]]
    assert got[1]["run_at"] == when and got[1]["metadata"] == {"x": 1}


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


def test_job_insert_one_unique_writes_the_key_and_skips_a_held_one() -> None:
    first = insert_unique()
    assert first is not None
    assert snapshot(first.id)["unique_key"] == KEY
    assert snapshot(first.id)["unique_states"] == DEFAULT_MASK
    assert insert_unique() is None  # held: nothing written, no error
    assert Job.objects.filter(unique_key=KEY).count() == 1
    assert insert_unique(OTHER_KEY) is not None


def test_job_insert_one_unique_ignores_rows_whose_state_is_not_in_their_mask() -> None:
    # waiting_external (bit 7) is not in the default mask: such a row holds nothing.
    JobFactory(state="waiting_external", unique_key=KEY, unique_states=DEFAULT_MASK)
    assert insert_unique() is not None
    # A new row whose own mask leaves out its state neither holds nor conflicts.
    assert insert_unique(mask="00000001") is not None
    assert insert_unique() is None


def test_job_insert_many_unique_reports_skipped_positions_in_input_order() -> None:
    held = insert_unique()
    assert held is not None
    ids = run(
        unique_sql.job_insert_many_unique,
        kinds=["k_a", "k_b", "k_c", "k_d"],
        queues=[Q] * 4,
        args=['{"n": 0}', '{"n": 1}', '{"n": 2}', '{"n": 3}'],
        states=["available"] * 4,
        priorities=[2] * 4,
        max_attempts=[25] * 4,
        run_ats=[None] * 4,
        metadata=["{}"] * 4,
        tags=["[]", '["x"]', "[]", "[]"],
        channels=[],
        unique_keys=[None, KEY, OTHER_KEY, OTHER_KEY],  # held; new; a duplicate of the call
        unique_states=[None, DEFAULT_MASK, DEFAULT_MASK, DEFAULT_MASK],
    )
    assert ids[1] is None and ids[3] is None
    assert ids[0] is not None and ids[2] is not None and ids[0] < ids[2]
    assert snapshot(ids[0])["args"] == {"n": 0} and snapshot(ids[0])["unique_key"] is None
    assert snapshot(ids[2])["args"] == {"n": 2} and snapshot(ids[2])["unique_key"] == OTHER_KEY


def test_job_unique_holder_finds_the_holder_only() -> None:
    JobFactory(state="cancelled", unique_key=KEY, unique_states=DEFAULT_MASK)
    assert run(unique_sql.job_unique_holder, unique_key=KEY) is None
    holder = insert_unique()
    assert holder is not None
    assert run(unique_sql.job_unique_holder, unique_key=KEY) == holder.id


def test_job_unique_oldest_live_skips_terminal_jobs_and_takes_the_lowest_id() -> None:
    JobFactory(state="failed", unique_key=KEY, unique_states=DEFAULT_MASK)
    parked = JobFactory(state="waiting_external", unique_key=KEY, unique_states=DEFAULT_MASK)
    JobFactory(state="available", unique_key=KEY, unique_states=DEFAULT_MASK)
    assert run(unique_sql.job_unique_oldest_live, unique_key=KEY) == parked.id
    assert run(unique_sql.job_unique_oldest_live, unique_key=OTHER_KEY) is None


# -- job_claim_many -----------------------------------------------------------------------
def test_job_claim_many_bumps_attempt_and_run_lease_and_inserts_the_lease() -> None:
    job = JobFactory(attempt=2, run_lease=5)
    (row,) = claim(worker="w-claim", deadline=60)
    assert (row.id, row.state, row.attempt, row.run_lease) == (job.id, "running", 3, 6)
    assert row.attempted_at == transaction_now()
    assert row.attempted_by == ["w-claim"]
    lease = ActiveLease.objects.get(job_id=job.id)
    assert (lease.run_lease, lease.queue, lease.worker_id) == (6, Q, "w-claim")
    assert lease.heartbeat_at == lease.claimed_at == transaction_now()
    assert lease.deadline_at is not None
    assert lease.deadline_at - lease.claimed_at == dt.timedelta(seconds=60)


def test_job_claim_many_counts_on_from_an_epoch_run_lease_above_every_epoch() -> None:
    """On a connection without a lease epoch (Django's, here) a claim counts run_lease on,
    unless an epoch handed out the last one: a claim under an epoch that a crash lost had
    a run_lease below the next epoch, so a durable claim must not count on from the row's
    older value into it (decision 029)."""
    epoch = run(leases_sql.lease_epoch_take)
    assert epoch is not None
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT set_config('{LEASE_EPOCH_SETTING}', '', false)")  # forget it
    counted = JobFactory(run_lease=7)
    under_epoch = JobFactory(run_lease=epoch * EPOCH_SPACE + 3)
    leases = {row.id: row.run_lease for row in claim()}
    assert leases[counted.id] == 8
    assert leases[under_epoch.id] == (epoch + 1) * EPOCH_SPACE  # above every epoch taken


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


def test_job_claim_many_without_deadline_leaves_deadline_null() -> None:
    job = JobFactory()
    claim(deadline=0)
    assert ActiveLease.objects.get(job_id=job.id).deadline_at is None


def test_job_claim_many_orders_by_priority_run_at_id_and_respects_the_limit() -> None:
    base = timezone.now() - dt.timedelta(hours=1)
    late_urgent = JobFactory(priority=1, run_at=base + dt.timedelta(minutes=5))
    early_urgent = JobFactory(priority=1, run_at=base)
    same_time_a = JobFactory(priority=2, run_at=base)
    same_time_b = JobFactory(priority=2, run_at=base)
    JobFactory(priority=4, run_at=base)
    claimed = claim(limit=4)
    assert [r.id for r in claimed] == [
        early_urgent.id,
        late_urgent.id,
        same_time_a.id,
        same_time_b.id,
    ]
    assert [r.id for r in claim(limit=10)] != []  # the batch job is still there
    assert claim(limit=10) == []


def test_job_claim_many_takes_only_due_available_jobs_of_its_queue() -> None:
    JobFactory(queue="core-sql-other")
    JobFactory(run_at=timezone.now() + dt.timedelta(hours=1))
    for state in ("scheduled", "retryable", "running", "waiting_external", "completed"):
        JobFactory(state=state)
    assert claim() == []


def test_job_claim_many_skips_a_paused_queue() -> None:
    JobFactory()
    QueueState.objects.create(queue=Q, paused=True)
    assert claim() == []
    QueueState.objects.filter(queue=Q).update(paused=False)
    assert len(claim()) == 1


def test_job_claim_many_keeps_the_last_ten_workers() -> None:
    job = JobFactory(attempted_by=[f"w{i}" for i in range(12)])
    (row,) = claim(worker="newest")
    assert row.attempted_by == [*[f"w{i}" for i in range(3, 12)], "newest"]
    assert snapshot(job.id)["attempted_by"] == row.attempted_by


def test_job_claim_many_is_one_statement_whatever_the_batch(
    django_assert_num_queries: Any,
) -> None:
    JobFactory.create_batch(50)
    with django_assert_num_queries(1):
        assert len(claim(limit=50)) == 50
    assert ActiveLease.objects.count() == 50


# -- job_complete_many --------------------------------------------------------------------
def test_job_complete_many_applies_matching_attempts_only() -> None:
    a = running(progress={"percent": 50.0})
    b = running()
    stale = running()
    results = ['{"ok": 1}', None, '"late"']
    applied = complete([(a.id, a.run_lease), (b.id, b.run_lease), (stale.id, 99)], results)
    assert sorted(r.id for r in applied) == [a.id, b.id]
    done_a = snapshot(a.id)
    assert (done_a["state"], done_a["progress"], done_a["result"]) == ("completed", None, {"ok": 1})
    assert done_a["finalized_at"] == transaction_now()
    assert snapshot(b.id)["result"] is None
    assert set(ActiveLease.objects.values_list("job_id", flat=True)) == {stale.id}
    assert snapshot(stale.id)["state"] == "running"


def test_job_complete_many_ignores_jobs_that_are_not_running() -> None:
    for state in ("available", "retryable", "waiting_external", "cancelled", "completed"):
        job = JobFactory(state=state, run_lease=1)
        before = snapshot(job.id)
        assert complete([(job.id, 1)]) == []
        assert snapshot(job.id) == before


def test_job_complete_many_is_one_statement(django_assert_num_queries: Any) -> None:
    claimed = [running() for _ in range(20)]
    with django_assert_num_queries(1):
        assert len(complete([(r.id, r.run_lease) for r in claimed])) == 20


def test_job_complete_many_lean_writes_the_same_and_answers_only_finalized_at() -> None:
    a, b = running(progress={"percent": 50.0}), running()
    stale = running()
    finalized = run(
        jobs_sql.job_complete_many_lean,
        ids=[a.id, b.id, stale.id],
        leases=[a.run_lease, b.run_lease, 99],
        results=['{"ok": 1}', None, None],
    )
    assert finalized == {a.id: transaction_now(), b.id: transaction_now()}
    done_a = snapshot(a.id)
    assert (done_a["state"], done_a["progress"], done_a["result"]) == ("completed", None, {"ok": 1})
    assert set(ActiveLease.objects.values_list("job_id", flat=True)) == {stale.id}
    assert snapshot(stale.id)["state"] == "running"


# -- job_complete_one ---------------------------------------------------------------------
def test_job_complete_one_applies_a_matching_attempt_only() -> None:
    job, other = running(progress={"percent": 50.0}), running()
    assert run(jobs_sql.job_complete_one, id=job.id, run_lease=99, result=None) is None
    assert snapshot(job.id)["state"] == "running"
    done = run(jobs_sql.job_complete_one, id=job.id, run_lease=job.run_lease, result='{"ok": 1}')
    assert done is not None and (done.id, done.state, done.result) == (
        job.id,
        "completed",
        {"ok": 1},
    )
    stored = snapshot(job.id)
    assert (stored["progress"], stored["finalized_at"]) == (None, transaction_now())
    assert list(ActiveLease.objects.values_list("job_id", flat=True)) == [other.id]
    assert run(jobs_sql.job_complete_one, id=job.id, run_lease=job.run_lease, result=None) is None


# -- job_set_state_if_running -------------------------------------------------------------
def test_job_set_state_if_running_retry_with_backoff() -> None:
    row = running()
    (moved,) = set_state(
        row, Transition("retryable", None, run_at_mode="backoff", error="E: x"), '{"p": 1}'
    )
    assert (moved.state, moved.attempt, moved.progress) == ("retryable", 1, {"p": 1})
    assert moved.finalized_at is not None
    assert 2.0 <= (moved.run_at - moved.finalized_at).total_seconds() < 2.5
    assert moved.errors == [{"error": "E: x", "attempt": 1, "at": moved.errors[0]["at"]}]
    assert not ActiveLease.objects.filter(job_id=row.id).exists()


def test_job_set_state_if_running_backoff_is_capped_at_a_day() -> None:
    job = JobFactory(attempt=40, max_attempts=100)
    (row,) = claim()
    (moved,) = set_state(row, Transition("retryable", None, run_at_mode="backoff", error="e"))
    assert moved.finalized_at is not None
    assert moved.run_at - moved.finalized_at == dt.timedelta(days=1)
    assert moved.id == job.id


def test_job_set_state_if_running_snooze_refunds_and_keeps_finalized_at() -> None:
    earlier = timezone.now() - dt.timedelta(hours=3)
    row = running(finalized_at=earlier, progress={"keep": True})
    transition = Transition(
        "scheduled", None, run_at_mode="delay", delay_seconds=9, attempt_refund=1, finalize=False
    )
    (moved,) = set_state(row, transition)
    assert (moved.state, moved.attempt, moved.finalized_at) == ("scheduled", 0, earlier)
    assert moved.attempted_at is not None
    assert moved.run_at - moved.attempted_at == dt.timedelta(seconds=9)
    assert (moved.errors, moved.progress) == ([], {"keep": True})


def test_job_set_state_if_running_terminal_failure_and_cancel() -> None:
    failed = running()
    (row,) = set_state(failed, Transition("failed", None, error="fatal", terminal=True))
    assert row.state == "failed" and row.errors[0]["terminal"] is True
    cancelled = running()
    (row,) = set_state(cancelled, Transition("cancelled", None, error="cancelled: r"))
    assert row.state == "cancelled" and "terminal" not in row.errors[0]
    assert row.finalized_at == transaction_now()


def test_job_set_state_if_running_park_needs_the_registered_callback() -> None:
    row = running()
    token = uuid.uuid4()
    park = Transition("waiting_external", None, finalize=False, callback_id=token)
    assert set_state(row, park) == []  # no callback registered: the contract guard
    run(
        jobs_sql.job_register_callback,
        id=row.id,
        run_lease=row.run_lease,
        callback_id=token,
        timeout_seconds=30,
    )
    (parked,) = set_state(row, park)
    assert (parked.state, parked.callback_id, parked.finalized_at) == (
        "waiting_external",
        token,
        None,
    )
    assert not ActiveLease.objects.filter(job_id=row.id).exists()


def test_job_set_state_if_running_clears_a_callback_on_other_outcomes() -> None:
    row = running()
    run(
        jobs_sql.job_register_callback,
        id=row.id,
        run_lease=row.run_lease,
        callback_id=uuid.uuid4(),
        timeout_seconds=30,
    )
    (moved,) = set_state(row, Transition("retryable", None, run_at_mode="backoff", error="e"))
    assert (moved.callback_id, moved.callback_timeout_at) == (None, None)


def test_job_set_state_if_running_with_a_stale_run_lease_changes_nothing() -> None:
    row = running()
    # The attempt was rescued and re-claimed: the job runs again under a newer lease.
    Job.objects.filter(id=row.id).update(run_lease=F("run_lease") + 1)
    ActiveLease.objects.filter(job_id=row.id).update(run_lease=F("run_lease") + 1)
    before = snapshot(row.id)
    for transition in (
        Transition("retryable", None, run_at_mode="backoff", error="late"),
        Transition("failed", None, error="late", terminal=True),
        Transition("cancelled", None, error="late"),
        Transition("scheduled", None, run_at_mode="delay", delay_seconds=1, attempt_refund=1),
    ):
        assert set_state(row, transition, '{"late": 1}') == []
    assert complete([(row.id, row.run_lease)]) == []
    assert snapshot(row.id) == before
    assert ActiveLease.objects.get(job_id=row.id).run_lease == row.run_lease + 1


@pytest.mark.parametrize("state", ["available", "retryable", "scheduled", "completed", "failed"])
def test_job_set_state_if_running_on_a_job_that_is_not_running_changes_nothing(
    state: str,
) -> None:
    job = JobFactory(state=state, run_lease=3, attempt=1)
    row = JobSnapshot.from_mapping(snapshot(job.id))
    before = snapshot(job.id)
    assert set_state(row, Transition("failed", None, error="x", terminal=True)) == []
    assert snapshot(job.id) == before


def test_job_set_state_if_running_caps_the_errors_it_appends_to() -> None:
    history = [{"error": f"e{n}", "attempt": n, "at": "x"} for n in range(1, 21)]  # 20 kept
    row = running(errors=history, max_attempts=100)
    retry = Transition("retryable", None, run_at_mode="backoff", error="latest")
    (moved,) = set_state(row, retry)
    errors = moved.errors
    # The first, a count of what was dropped, the most recent: still ERRORS_KEPT entries.
    assert len(errors) == ERRORS_KEPT
    assert errors[0]["error"] == "e1"
    assert errors[1] == {"error": "2 earlier error entries omitted", "omitted": 2}
    assert [e["error"] for e in errors[2:]] == [f"e{n}" for n in range(4, 21)] + ["latest"]
    # Appending again grows the count, never the list.
    again = running_again(moved)
    (moved,) = set_state(again, retry)
    assert len(moved.errors) == ERRORS_KEPT and moved.errors[1]["omitted"] == 3


def running_again(row: JobSnapshot) -> JobSnapshot:
    """The retried job claimed again (due now)."""
    Job.objects.filter(id=row.id).update(state="available", run_at=timezone.now() - AGO)
    (claimed,) = [r for r in claim(limit=1000) if r.id == row.id]
    return claimed


# -- job_progress_flush, job_get ----------------------------------------------------------
def test_job_progress_flush_is_guarded() -> None:
    row = running()
    assert run(jobs_sql.job_progress_flush, id=row.id, run_lease=row.run_lease, progress='{"p": 2}')
    assert snapshot(row.id)["progress"] == {"p": 2}
    assert not run(jobs_sql.job_progress_flush, id=row.id, run_lease=0, progress='{"p": 3}')
    assert snapshot(row.id)["progress"] == {"p": 2}


def test_job_get() -> None:
    job = JobFactory(args={"x": [1, 2]}, tags=["t"])
    (row,) = jobs(jobs_sql.job_get, id=job.id)
    assert (row.id, row.args, row.tags) == (job.id, {"x": [1, 2]}, ["t"])
    assert jobs(jobs_sql.job_get, id=job.id + 1000) == []


# -- callbacks of a running attempt -------------------------------------------------------
def test_job_register_callback_sets_the_token_and_timeout() -> None:
    row = running()
    token = uuid.uuid4()
    registered = run(
        jobs_sql.job_register_callback,
        id=row.id,
        run_lease=row.run_lease,
        callback_id=token,
        timeout_seconds=90,
    )
    assert registered is not None
    (callback_id, timeout_at) = registered
    assert callback_id == token
    assert timeout_at - transaction_now() == dt.timedelta(seconds=90)
    stale = run(
        jobs_sql.job_register_callback,
        id=row.id,
        run_lease=row.run_lease + 1,
        callback_id=uuid.uuid4(),
        timeout_seconds=90,
    )
    assert stale is None and snapshot(row.id)["callback_id"] == token


def test_job_enter_wait_parks_in_place_and_lifts_the_deadline() -> None:
    JobFactory()
    (row,) = claim(deadline=60)
    token = uuid.uuid4()
    params = {"id": row.id, "run_lease": row.run_lease, "callback_id": token}
    assert run(jobs_sql.job_enter_wait, **params) is False  # not registered yet
    run(jobs_sql.job_register_callback, timeout_seconds=30, **params)
    assert run(jobs_sql.job_enter_wait, **params) is True
    assert snapshot(row.id)["state"] == "waiting_external"
    lease = ActiveLease.objects.get(job_id=row.id)
    assert (lease.run_lease, lease.deadline_at) == (row.run_lease, None)


def test_job_wait_state_reads_state_lease_and_whether_a_payload_waits() -> None:
    row = running()
    assert run(jobs_sql.job_wait_state, id=row.id) == ("running", row.run_lease, False)
    # A JSON null payload is still a payload: only SQL NULL means "nothing pending".
    Job.objects.filter(id=row.id).update(callback_result=Value(None, JSONField()))
    assert run(jobs_sql.job_wait_state, id=row.id) == ("running", row.run_lease, True)


def test_job_take_callback_result_hands_the_payload_over_once() -> None:
    row = running()
    params = {"id": row.id, "run_lease": row.run_lease}
    assert run(jobs_sql.job_take_callback_result, **params) is None
    Job.objects.filter(id=row.id).update(callback_result={"ok": 1}, metadata={"k": 2})
    taken = run(jobs_sql.job_take_callback_result, **params)
    assert taken is not None and json.loads(taken[0]) == {"ok": 1}
    assert (snapshot(row.id)["callback_result"], snapshot(row.id)["metadata"]) == (None, {"k": 2})
    assert run(jobs_sql.job_take_callback_result, **params) is None  # once only
    # Another attempt's read does not consume the payload.
    Job.objects.filter(id=row.id).update(callback_result=1)
    run(jobs_sql.job_take_callback_result, id=row.id, run_lease=row.run_lease + 1)
    assert snapshot(row.id)["callback_result"] == 1


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


# -- admin --------------------------------------------------------------------------------
def test_job_cancel_many_cancels_non_terminal_jobs_and_leaves_leases_to_their_statement() -> None:
    live = running()
    queued = JobFactory()
    done = JobFactory(state="completed")
    # Raw, to see the statement's last column: whether it sent the cancel hint.
    with connection.cursor() as cursor:
        cursor.execute(admin_sql.JOB_CANCEL_MANY.sql, {"ids": [live.id, queued.id, done.id]})
        by_id = {row[0]: row for row in cursor.fetchall()}
    assert set(by_id) == {live.id, queued.id}
    assert by_id[live.id][-1] == ""  # pg_notify() ran for the running attempt
    assert by_id[queued.id][-1] is None  # ... and not for a queued job
    assert snapshot(live.id)["state"] == snapshot(queued.id)["state"] == "cancelled"
    assert snapshot(live.id)["errors"] == []  # T19: no error entry
    assert snapshot(done.id)["state"] == "completed"
    assert ActiveLease.objects.filter(job_id=live.id).exists()  # lease_delete_for_jobs' job
    run(leases_sql.lease_delete_for_jobs, ids=[live.id, queued.id])
    assert not ActiveLease.objects.exists()


def test_job_retry_many_resets_attempts_and_keeps_errors() -> None:
    failed = JobFactory(state="failed", attempt=3, run_lease=3, errors=[{"error": "x"}])
    cancelled = JobFactory(state="cancelled", attempt=1, run_lease=1)
    completed = JobFactory(state="completed", attempt=1)
    result = jobs(admin_sql.job_retry_many, ids=[failed.id, cancelled.id, completed.id])
    assert sorted(r.id for r in result) == [failed.id, cancelled.id]
    row = snapshot(failed.id)
    assert (row["state"], row["attempt"], row["run_lease"], row["errors"]) == (
        "available",
        0,
        3,
        [{"error": "x"}],
    )
    assert row["finalized_at"] is None and row["run_at"] == transaction_now()
    assert snapshot(completed.id)["state"] == "completed"


# -- workers ------------------------------------------------------------------------------
def upsert(worker_id: str, completed: int = 0, leader: bool = False) -> None:
    run(
        workers_sql.worker_instance_upsert,
        worker_id=worker_id,
        hostname="host",
        pid=123,
        queues='{"default": 10}',
        leader=leader,
        shutting_down=False,
        completed_count=completed,
    )


def test_worker_instance_upsert_inserts_then_updates() -> None:
    upsert("core-w1")
    upsert("core-w1", completed=5, leader=True)
    worker = WorkerInstance.objects.get(worker_id="core-w1")
    assert (worker.completed_count, worker.leader, worker.queues) == (5, True, {"default": 10})


def test_worker_instance_delete() -> None:
    upsert("core-w1")
    upsert("core-w2")
    run(workers_sql.worker_instance_delete, worker_id="core-w1")
    assert list(WorkerInstance.objects.values_list("worker_id", flat=True)) == ["core-w2"]


def test_worker_instance_prune_forgets_silent_workers() -> None:
    upsert("core-old")
    upsert("core-new")
    WorkerInstance.objects.filter(worker_id="core-old").update(last_seen_at=timezone.now() - AGO)
    run(workers_sql.worker_instance_prune, older_than_seconds=3600)
    assert list(WorkerInstance.objects.values_list("worker_id", flat=True)) == ["core-new"]


# -- waker role ---------------------------------------------------------------------------
def role_locks(key: int) -> int:
    """This session's hold count of the advisory lock `key` (a bigint key is two int4s)."""
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND pid = pg_backend_pid() AND classid::int8 = %s AND objid::int8 = %s "
            "AND objsubid = 1",
            [unsigned >> 32, unsigned & 0xFFFFFFFF],
        )
        return int(cursor.fetchone()[0])


def test_waker_try_take_and_waker_give_up_hold_the_role_in_this_session() -> None:
    key = wakers_sql.waker_key(Q)
    assert key != wakers_sql.waker_key(Q + "x")
    assert -(2**63) <= key < 2**63  # a PostgreSQL bigint
    try:
        assert run(wakers_sql.waker_try_take, key=key) is True
        assert role_locks(key) == 1
        # The lock is the session's: a second session would not get it (the acceptance and
        # role tests show that); the holder gives it up once and holds nothing after.
        assert run(wakers_sql.waker_give_up, key=key, channel=role_channel_for(Q)) is True
        assert role_locks(key) == 0
        assert run(wakers_sql.waker_give_up, key=key, channel=role_channel_for(Q)) is False
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")  # never outlive the test


def test_waker_session_liveness_sets_only_what_the_server_left_at_zero() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('tcp_keepalives_idle')")
        (idle_before,) = cursor.fetchone()
        cursor.execute("SET LOCAL tcp_keepalives_count = 7")  # a DBA's choice stands
        run(wakers_sql.waker_session_liveness)  # rolled back with the test's transaction
        cursor.execute(
            "SELECT current_setting('tcp_keepalives_idle'), "
            "current_setting('tcp_keepalives_count'), inet_client_port() IS NULL"
        )
        idle, count, unix_socket = cursor.fetchone()
    # On a Unix socket the server ignores keepalives (and reads them as 0).
    if unix_socket:
        assert (idle, count) == ("0", "0")
    else:
        assert (idle, count) == ("10" if idle_before == "0" else idle_before, "7")


# -- cron schedules -----------------------------------------------------------------------
def sync_schedule(**changes: Any) -> list[str]:
    """Sync one schedule "core-cron" (every minute, UTC) with `changes` applied."""
    params: dict[str, Any] = {
        "names": ["core-cron"],
        "expressions": ["* * * * *"],
        "timezones": ["UTC"],
        "kinds": ["core_sql"],
        "args": ['{"n": 1}'],
        "queues": [Q],
        "priorities": [2],
        "max_attempts": [5],
        "tags": ['["a", "b"]'],
        "metadata": ['{"m": 1}'],
        "policies": ["coalesce"],
    }
    return run(cron_sql.cron_schedule_upsert_many, **{**params, **changes})


def test_cron_schedule_upsert_many_inserts_updates_changed_rows_only_and_keeps_fire_state() -> None:
    assert sync_schedule() == ["core-cron"]
    row = CronSchedule.objects.get(name="core-cron")
    assert (row.args, row.tags, row.metadata, row.max_attempts) == (
        {"n": 1},
        ["a", "b"],
        {"m": 1},
        5,
    )
    assert sync_schedule() == []  # unchanged: not rewritten
    fired = transaction_now() - AGO
    CronSchedule.objects.filter(name="core-cron").update(paused=True, last_fire_at=fired)
    assert sync_schedule(expressions=["0 * * * *"], policies=["catch_up"]) == ["core-cron"]
    row.refresh_from_db()
    assert (row.expression, row.missed_fire_policy) == ("0 * * * *", "catch_up")
    assert row.paused and row.last_fire_at == fired


def test_cron_schedule_list_unpaused_reads_the_database_clock() -> None:
    sync_schedule(names=["core-cron"])
    sync_schedule(names=["core-cron-paused"])
    CronSchedule.objects.filter(name="core-cron-paused").update(paused=True)
    (state,) = run(cron_sql.cron_schedule_list_unpaused)
    assert state.name == "core-cron" and state.now == transaction_now()
    assert (state.expression, state.timezone, state.last_fire_at) == ("* * * * *", "UTC", None)


def test_cron_schedule_fire_swaps_last_fire_at_and_inserts_the_job() -> None:
    sync_schedule()
    fire_at = transaction_now().replace(second=0, microsecond=0)

    def fire(expected: dt.datetime | None) -> JobSnapshot | None:
        return run(
            cron_sql.cron_schedule_fire,
            name="core-cron",
            expected_last=expected,
            fire_at=fire_at,
            fire_time=fire_at.isoformat(),
        )

    job = fire(None)
    assert job is not None and job.state == "available" and job.tags == ["a", "b"]
    assert job.metadata == {"m": 1, "cron_name": "core-cron", "cron_fire_time": fire_at.isoformat()}
    row = CronSchedule.objects.get(name="core-cron")
    assert row.last_fire_at == fire_at and row.last_job_id == job.id
    assert fire(None) is None  # the swap already happened
    CronSchedule.objects.filter(name="core-cron").update(paused=True)
    assert fire(fire_at) is None  # paused
    assert Job.objects.filter(kind="core_sql").count() == 1


def test_cron_schedule_fire_is_one_statement(django_assert_num_queries: Any) -> None:
    sync_schedule()
    now = transaction_now()
    with django_assert_num_queries(1):
        run(
            cron_sql.cron_schedule_fire,
            name="core-cron",
            expected_last=None,
            fire_at=now,
            fire_time="t",
        )


def test_cron_schedule_trigger_inserts_a_job_and_leaves_last_fire_at() -> None:
    sync_schedule()
    job = run(cron_sql.cron_schedule_trigger, name="core-cron")
    assert job is not None and job.metadata["triggered_manually"] is True
    assert dt.datetime.fromisoformat(job.metadata["cron_fire_time"]) == transaction_now()
    row = CronSchedule.objects.get(name="core-cron")
    assert row.last_fire_at is None and row.last_job_id == job.id
    assert run(cron_sql.cron_schedule_trigger, name="missing") is None


# -- job_reserve_ids / job_copy_many (enqueue_many's COPY path, decision 026) -------------
@dataclasses.dataclass(frozen=True)
class CopyRowTemplate:
    kind: str = "core_copy"
    queue: str = "core-copy"
    state: str = "available"
    priority: int = 3
    max_attempts: int = 4
    run_at: dt.datetime | None = None
    metadata: str = '{"m": 1}'
    tags: list[str] = dataclasses.field(default_factory=lambda: ["t"])


def test_job_reserve_ids_draws_ascending_ids_at_the_transaction_clock() -> None:
    ids, now = run(job_copy.job_reserve_ids, count=3, channels=[])
    assert len(ids) == 3 and ids == sorted(ids) and now == transaction_now()
    assert run(job_copy.job_reserve_ids, count=1, channels=[])[0][0] > ids[-1]


def test_job_copy_many_writes_rows_with_the_reserved_ids() -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    scheduled = CopyRowTemplate(state="scheduled", run_at=later)
    ids = job_copy.job_copy_many(
        "default", [(CopyRowTemplate(), '{"n":1}'), (scheduled, '{"n":2}')], channels=[]
    )
    first, second = (Job.objects.get(id=i) for i in ids)
    assert (first.kind, first.queue, first.state, first.priority, first.max_attempts) == (
        "core_copy",
        "core-copy",
        "available",
        3,
        4,
    )
    assert (first.args, first.metadata, first.tags, first.errors) == ({"n": 1}, {"m": 1}, ["t"], [])
    assert (first.attempt, first.run_lease, first.attempted_by) == (0, 0, [])
    assert first.run_at == first.created_at == transaction_now()
    assert (second.state, second.run_at, second.args) == ("scheduled", later, {"n": 2})


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


# -- coverage of the statement modules ----------------------------------------------------
def test_every_named_statement_has_a_test_named_after_it() -> None:
    modules = (
        jobs_sql,
        job_copy,
        leases_sql,
        maintenance_sql,
        admin_sql,
        workers_sql,
        cron_sql,
        unique_sql,
        rollups_sql,
        wakers_sql,
    )
    statements = [
        (module, value)
        for module in modules
        for value in vars(module).values()
        if isinstance(value, Statement)
    ]
    # The observability statements are tested beside the figures they feed.
    tests = [name for name in (*globals(), *vars(test_observability)) if name.startswith("test_")]
    untested = sorted(s.name for _, s in statements if not any(s.name in t for t in tests))
    assert untested == []
    # Each statement is run through one typed function of the same name (STYLE §18).
    for module, statement in statements:
        assert callable(getattr(module, statement.name, None)), statement.name


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


@pytest.mark.usefixtures("big_table")
def test_job_claim_many_plan_uses_the_dispatch_index() -> None:
    plan = explain(
        jobs_sql.job_claim_many,
        queue="q3",
        limit=10,
        worker_id="w",
        deadline_seconds=0,
        lease_now=False,
    )
    assert "awa_jobs_dispatch_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan


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
def test_job_complete_many_plan_uses_the_primary_key() -> None:
    ids = list(Job.objects.filter(state="running").values_list("id", flat=True)[:10])
    plan = explain(
        jobs_sql.job_complete_many, ids=ids, leases=[1] * len(ids), results=[None] * len(ids)
    )
    assert_finds_rows_by_id(plan)


@pytest.mark.usefixtures("big_table")
def test_job_complete_one_plan_uses_the_primary_key() -> None:
    job_id = Job.objects.filter(state="running").values_list("id", flat=True)[0]
    plan = explain(jobs_sql.job_complete_one, id=job_id, run_lease=1, result=None)
    assert_finds_rows_by_id(plan)


@pytest.mark.usefixtures("big_table")
def test_job_set_state_if_running_plan_uses_the_primary_key() -> None:
    available = Job.objects.filter(state="available").values().first()
    assert available is not None
    row = JobSnapshot.from_mapping(available)
    plan = explain(
        jobs_sql.job_set_state_if_running,
        id=row.id,
        run_lease=row.run_lease,
        state="retryable",
        run_at_mode="backoff",
        error="e",
    )
    assert_finds_rows_by_id(plan)


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


@pytest.mark.usefixtures("big_table")
def test_job_unique_holder_plan_uses_the_unique_index() -> None:
    plan = explain(unique_sql.job_unique_holder, unique_key=KEY)
    assert "awa_jobs_unique_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan


@pytest.mark.usefixtures("big_table")
def test_job_unique_oldest_live_plan_uses_the_unique_key_index() -> None:
    plan = explain(unique_sql.job_unique_oldest_live, unique_key=KEY)
    assert "awa_jobs_unique_key_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan


def assert_finds_rows_by_id(plan: str) -> None:
    """The guarded rows are found through an index on id: the primary key, or the
    (state, id) index the planner may prefer for a `state = 'running'` guard (both are one
    probe per id; which one wins depends on the statistics), never by scanning the table."""
    assert re.search(
        r"Index Scan using awa_jobs_(hot_pkey|state_id_part_idx) on awa_jobs_hot", plan
    ), plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan
