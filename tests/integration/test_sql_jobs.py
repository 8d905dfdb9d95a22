"""The named statements of `awa_django/storage/sql/jobs.py` (insert, claim, complete, set
state, progress, callbacks) run against real PostgreSQL, one test or more per statement
named after it, the lease guard on every attempt write, and the plans of the hot ones on
a 20,000-row table.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from django.db import connection
from django.db.models import F, JSONField, Value
from django.utils import timezone

from awa_django.execution.outcomes import Transition
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import (
    ActiveLease,
    Job,
    QueueState,
)
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.storage.sql.fragments import (
    EPOCH_SPACE,
    ERRORS_KEPT,
    LEASE_EPOCH_SETTING,
)
from awa_django.storage.sql.transitions import (
    ATTEMPT_MOVES,
    CANCEL,
    FAIL,
    HAND_BACK,
    PARK,
    RETRY_AFTER,
    RETRY_LATER,
    SNOOZE,
    Move,
)
from tests.integration.sql_helpers import (
    AGO,
    DEFAULT_MASK,
    KEY,
    OTHER_KEY,
    JobFactory,
    Q,
    assert_finds_rows_by_id,
    big_table,
    claim,
    complete,
    explain,
    insert_unique,
    jobs,
    run,
    running,
    set_state,
    snapshot,
    transaction_now,
)

pytestmark = pytest.mark.django_db
__all__ = ["big_table"]  # the fixture, imported for the plan tests


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


# -- job_insert_one_unique (the key lookups: test_sql_unique.py) -------------------------
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
        row,
        Transition(RETRY_LATER, error="E: x"),
        '{"p": 1}',
    )
    assert (moved.state, moved.attempt, moved.progress) == ("retryable", 1, {"p": 1})
    assert moved.finalized_at is not None
    assert 2.0 <= (moved.run_at - moved.finalized_at).total_seconds() < 2.5
    assert moved.errors == [{"error": "E: x", "attempt": 1, "at": moved.errors[0]["at"]}]
    assert not ActiveLease.objects.filter(job_id=row.id).exists()


def test_job_set_state_if_running_backoff_is_capped_at_a_day() -> None:
    job = JobFactory(attempt=40, max_attempts=100)
    (row,) = claim()
    (moved,) = set_state(row, Transition(RETRY_LATER, error="e"))
    assert moved.finalized_at is not None
    assert moved.run_at - moved.finalized_at == dt.timedelta(days=1)
    assert moved.id == job.id


def test_job_set_state_if_running_snooze_refunds_and_keeps_finalized_at() -> None:
    earlier = timezone.now() - dt.timedelta(hours=3)
    row = running(finalized_at=earlier, progress={"keep": True})
    transition = Transition(SNOOZE, delay_seconds=9)
    (moved,) = set_state(row, transition)
    assert (moved.state, moved.attempt, moved.finalized_at) == ("scheduled", 0, earlier)
    assert moved.attempted_at is not None
    assert moved.run_at - moved.attempted_at == dt.timedelta(seconds=9)
    assert (moved.errors, moved.progress) == ([], {"keep": True})


def test_job_set_state_if_running_terminal_failure_and_cancel() -> None:
    failed = running()
    (row,) = set_state(failed, Transition(FAIL, error="fatal", terminal=True))
    assert row.state == "failed" and row.errors[0]["terminal"] is True
    cancelled = running()
    (row,) = set_state(cancelled, Transition(CANCEL, error="cancelled: r"))
    assert row.state == "cancelled" and "terminal" not in row.errors[0]
    assert row.finalized_at == transaction_now()


def test_job_set_state_if_running_park_needs_the_registered_callback() -> None:
    row = running()
    token = uuid.uuid4()
    park = Transition(PARK, callback_id=token)
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
    (moved,) = set_state(row, Transition(RETRY_LATER, error="e"))
    assert (moved.callback_id, moved.callback_timeout_at) == (None, None)


def test_job_set_state_if_running_with_a_stale_run_lease_changes_nothing() -> None:
    row = running()
    # The attempt was rescued and re-claimed: the job runs again under a newer lease.
    Job.objects.filter(id=row.id).update(run_lease=F("run_lease") + 1)
    ActiveLease.objects.filter(job_id=row.id).update(run_lease=F("run_lease") + 1)
    before = snapshot(row.id)
    for transition in (
        Transition(RETRY_LATER, error="late"),
        Transition(RETRY_AFTER, delay_seconds=1),
        Transition(FAIL, error="late", terminal=True),
        Transition(CANCEL, error="late"),
        Transition(SNOOZE, delay_seconds=1),
        Transition(HAND_BACK, delay_seconds=1, error="late"),
        Transition(PARK, callback_id=uuid.uuid4()),
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
    assert set_state(row, Transition(FAIL, error="x", terminal=True)) == []
    assert snapshot(job.id) == before


def test_job_set_state_if_running_caps_the_errors_it_appends_to() -> None:
    history = [{"error": f"e{n}", "attempt": n, "at": "x"} for n in range(1, 21)]  # 20 kept
    row = running(errors=history, max_attempts=100)
    retry = Transition(RETRY_LATER, error="latest")
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


# -- plans on a realistic table -----------------------------------------------------------
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
@pytest.mark.parametrize("move", ATTEMPT_MOVES, ids=lambda move: move.name)
def test_job_set_state_if_running_plan_uses_the_primary_key(move: Move) -> None:
    available = Job.objects.filter(state="available").values().first()
    assert available is not None
    row = JobSnapshot.from_mapping(available)
    plan = explain(
        jobs_sql.job_set_state_if_running,
        id=row.id,
        run_lease=row.run_lease,
        move=move,
        delay_seconds=1.0,
        error="e",
        callback_id=uuid.uuid4(),
    )
    if move is PARK and "Index Scan using awa_jobs_callback_uniq on awa_jobs_hot" in plan:
        return  # the park's token: one probe of its unique index serves as well
    assert_finds_rows_by_id(plan)
