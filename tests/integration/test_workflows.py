"""Workflows (decision 043): enqueue after parents, the fan-in trigger, the policies,
chains, groups, batches, cascade cancel, retry restoring children, and the typed errors
of bad input. Runs handlers inline through `testing.drain()`; the parent outcome by
policy conformance on both schedulers is in test_workflow_conformance.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import awa_django
from awa_django import Client, InvalidDependency, ParentNotFound, TerminalError
from awa_django.execution.context import JobContext
from awa_django.storage.models import Job
from awa_django.storage.workflows import JobWait
from awa_django.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "wf-basic"
ran: list[tuple[str, int]] = []  # (name, job id) of every handler call, in order
seen: dict[str, list[Any]] = {}  # name -> parent_results() the child saw


@dataclass
class Step:
    name: str
    mode: str = "complete"  # complete | fail | cancel


@awa_django.job(Step, queue=QUEUE, max_attempts=1)
def step_handler(job: JobContext[Step]) -> Any:
    ran.append((job.args.name, job.id))
    seen[job.args.name] = job.parent_results()
    if job.args.mode == "fail":
        raise TerminalError(f"{job.args.name} failed")
    if job.args.mode == "cancel":
        return awa_django.Cancel("no")
    job.result = {"from": job.args.name}
    return None


@pytest.fixture(autouse=True)
def _reset() -> Any:
    ran.clear()
    seen.clear()
    yield
    ran.clear()
    seen.clear()


def names() -> list[str]:
    return [name for name, _ in ran]


def state(job_id: int | None) -> str:
    assert job_id is not None
    return Job.objects.get(id=job_id).state


def test_a_child_waits_then_runs_after_its_parents_with_their_results() -> None:
    a = awa_django.enqueue(Step("a"))
    b = awa_django.enqueue(Step("b"))
    c = awa_django.enqueue(Step("c"), after=[a, b.id])
    assert c.state == "waiting_parents"
    drain()
    assert sorted(names()[:2]) == ["a", "b"] and names()[2] == "c"
    assert [(p.id, p.state, p.result) for p in seen["c"]] == [
        (a.id, "completed", {"from": "a"}),
        (b.id, "completed", {"from": "b"}),
    ]
    assert state(c.id) == "completed"


def test_chain_runs_in_order_inside_one_drain() -> None:
    rows = awa_django.chain(Step("one"), Step("two"), Step("three"))
    assert [r.state for r in rows] == ["available", "waiting_parents", "waiting_parents"]
    drain()
    assert names() == ["one", "two", "three"]


def test_group_then_fans_in() -> None:
    flow = awa_django.group(Step("x"), Step("y"), Step("z")).then(Step("sum"))
    assert flow.child.state == "waiting_parents"
    drain()
    assert names()[-1] == "sum" and sorted(names()[:3]) == ["x", "y", "z"]


@pytest.mark.parametrize(
    ("policy", "child_state", "child_runs"),
    [("cancel", "cancelled", False), ("run", "completed", True), ("discard", None, False)],
)
def test_a_failed_parent_applies_the_policy(
    policy: str, child_state: str | None, child_runs: bool
) -> None:
    good = awa_django.enqueue(Step("good"))
    bad = awa_django.enqueue(Step("bad", "fail"))
    child = awa_django.enqueue(Step("child"), after=[good, bad], on_parent_failure=policy)
    drain()
    assert ("child" in names()) is child_runs
    found = Job.objects.filter(id=child.id).values_list("state", flat=True).first()
    assert found == child_state
    if child_runs:
        assert [p.failed for p in seen["child"]] == [False, True]


def test_enqueue_after_a_completed_parent_is_available_at_once() -> None:
    a = awa_django.enqueue(Step("a"))
    drain()
    child = awa_django.enqueue(Step("child"), after=[a])
    assert child.state == "available"


def test_enqueue_after_a_failed_parent_applies_the_policy_at_once() -> None:
    bad = awa_django.enqueue(Step("bad", "fail"))
    drain()
    assert awa_django.enqueue(Step("c"), after=[bad]).state == "cancelled"
    assert awa_django.enqueue(Step("r"), after=[bad], on_parent_failure="run").state == "available"
    discarded = awa_django.enqueue(Step("d"), after=[bad], on_parent_failure="discard")
    assert not Job.objects.filter(id=discarded.id).exists()


def test_a_missing_parent_raises_and_writes_nothing() -> None:
    a = awa_django.enqueue(Step("a"))
    before = Job.objects.count()
    with pytest.raises(ParentNotFound) as raised:
        awa_django.enqueue(Step("child"), after=[a.id, 10**12])
    assert raised.value.ids == (10**12,)
    assert Job.objects.count() == before
    assert not Job.objects.get(id=a.id).has_dependents


def test_a_missing_parent_leaves_the_callers_transaction_usable() -> None:
    with transaction.atomic():
        a = awa_django.enqueue(Step("a"))
        with pytest.raises(ParentNotFound):
            awa_django.enqueue(Step("child"), after=[a, 10**12])
        assert not Job.objects.get(id=a.id).has_dependents  # nothing written
        child = awa_django.enqueue(Step("child"), after=[a])
    assert state(child.id) == "waiting_parents"


@pytest.mark.parametrize(
    ("after", "policy"),
    [
        ([], "cancel"),
        (None, "sometimes"),
        ([1.5], "cancel"),
        (["7"], "cancel"),
        ([True], "cancel"),
        (7, "cancel"),
        ([0], "cancel"),
        ([2**63], "cancel"),  # no bigint: the driver refused it (DataError)
        (list(range(1, 10_002)), "cancel"),
    ],
)
def test_bad_dependencies_raise_a_typed_error(after: Any, policy: str) -> None:
    parent = awa_django.enqueue(Step("p"))
    before = Job.objects.count()
    with pytest.raises(InvalidDependency):
        awa_django.enqueue(
            Step("c"), after=[parent] if after is None else after, on_parent_failure=policy
        )
    assert Job.objects.count() == before


def test_a_bad_policy_is_refused_without_after_too() -> None:
    # A typo in the policy of a job whose `after=` is empty this time must not pass.
    with pytest.raises(InvalidDependency):
        awa_django.enqueue(Step("c"), on_parent_failure="sometimes")
    with pytest.raises(InvalidDependency):
        Client().enqueue(Step("c"), after=None, on_parent_failure="cancle")
    assert not Job.objects.exists()
    assert awa_django.enqueue(Step("c"), on_parent_failure="run").state == "available"


@pytest.mark.parametrize(
    ("jobs", "callback"),
    [
        (Step("one"), None),  # one job, not a list of them
        (None, None),
        (42, None),
        ([Step(str(i)) for i in range(10_001)], Step("done")),  # beyond MAX_PARENTS
    ],
)
def test_bad_batches_raise_a_typed_error_before_any_insert(jobs: Any, callback: Any) -> None:
    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidDependency):
        awa_django.batch(jobs, on_complete=callback)
    assert not [q for q in queries.captured_queries if "INSERT" in q["sql"].upper()]
    assert not Job.objects.exists()


def test_group_then_nothing_is_refused_before_the_members_are_written() -> None:
    # It enqueued the members and returned their list where a GroupResult was promised:
    # `.child` then failed after the members were in.
    with pytest.raises(InvalidDependency):
        awa_django.group(Step("a"), Step("b")).then(None)
    assert not Job.objects.exists()


def test_cascade_cancel_takes_every_waiting_descendant() -> None:
    a, b, c = awa_django.chain(Step("a"), Step("b"), Step("c"), on_parent_failure="run")
    Client().cancel(a.id, cascade=True)
    assert [state(j.id) for j in (a, b, c)] == ["cancelled"] * 3
    drain()
    assert names() == []


def test_retrying_a_failed_parent_restores_its_cancelled_children() -> None:
    a, b, c = awa_django.chain(Step("a", "fail"), Step("b"), Step("c"))
    drain()
    assert [state(j.id) for j in (a, b, c)] == ["failed", "cancelled", "cancelled"]
    Job.objects.filter(id=a.id).update(args={"name": "a", "mode": "complete"})
    Client().retry(a.id)
    assert [state(j.id) for j in (b, c)] == ["waiting_parents", "waiting_parents"]
    drain()
    assert names() == ["a", "a", "b", "c"]


def test_batch_counts_and_callbacks_run_once() -> None:
    batch_id = awa_django.batch(
        [Step("m1"), Step("m2"), Step("m3", "fail")],
        on_success=Step("success"),
        on_complete=Step("complete"),
    )
    progress = Client().batch_progress(batch_id)
    assert (progress.total, progress.ended) == (3, 0)
    drain()
    progress = Client().batch_progress(batch_id)
    assert (progress.completed, progress.failed, progress.cancelled) == (2, 1, 0)
    assert progress.finished_at is not None
    assert names().count("complete") == 1 and "success" not in names()
    assert state(progress.on_success_id) == "cancelled"


def test_concurrent_enqueue_and_completion_promote_once() -> None:
    with transaction.atomic():
        a = awa_django.enqueue(Step("a"))
        c = awa_django.enqueue(Step("c"), after=[a])
    assert JobWait.objects.get(job_id=c.id).pending_parents == 1


# -- dead letters ---------------------------------------------------------------------------
DLQ = "wf-dlq"


@dataclass
class DlStep:
    name: str
    mode: str = "fail"


@awa_django.job(DlStep, queue=DLQ, max_attempts=1)
def dl_step(job: JobContext[DlStep]) -> Any:
    ran.append((job.args.name, job.id))
    if job.args.mode == "fail":
        raise TerminalError("declined")
    return None


@pytest.fixture
def dead_letter_queue() -> Any:
    from django.test import override_settings

    with override_settings(AWA={"QUEUES": {"default": {}, DLQ: {"dead_letter": True}}}):
        yield


@pytest.mark.usefixtures("dead_letter_queue")
def test_a_dead_lettered_parent_fails_its_children_and_its_retry_restores_them() -> None:
    parent = awa_django.enqueue(DlStep("p"))
    cancel = awa_django.enqueue(Step("cancel"), after=[parent])
    awa_django.enqueue(Step("run"), after=[parent], on_parent_failure="run")
    drain()
    assert Client().dead_letter(parent.id).reason == "terminal_error"
    assert state(cancel.id) == "cancelled"
    assert names() == ["p", "run"]
    assert [(p.state, p.dead_lettered) for p in seen["run"]] == [("failed", True)]
    # A child enqueued after a dead-lettered parent counts it failed.
    late = awa_django.enqueue(Step("late"), after=[parent])
    assert late.state == "cancelled"
    Job.objects.filter(id=late.id).delete()
    Client().retry_dead_letters(ids=[parent.id])
    assert Job.objects.get(id=parent.id).has_dependents
    assert state(cancel.id) == "waiting_parents"
    assert Client().parents(cancel.id)[0].state is None


@pytest.mark.usefixtures("dead_letter_queue")
def test_a_dead_lettered_child_keeps_its_parents() -> None:
    parent = awa_django.enqueue(Step("p"))
    child = awa_django.enqueue(DlStep("c"), after=[parent])
    drain()
    assert names() == ["p", "c"]
    assert [p.id for p in Client().parents(child.id)] == [parent.id]
    Client().retry_dead_letters(ids=[child.id])
    assert Job.objects.get(id=child.id).has_parents
    assert Client().parents(child.id)[0].id == parent.id


@pytest.mark.usefixtures("dead_letter_queue")
def test_a_purged_dead_letter_takes_its_workflow_rows() -> None:
    from awa_django.storage.workflows import BatchMember, JobDependency

    parent = awa_django.enqueue(Step("p"))
    child = awa_django.enqueue(DlStep("c"), after=[parent])
    batch_id = awa_django.batch([DlStep("m")])
    (member,) = Client().batch_members(batch_id)
    drain()
    assert Client().dead_letter(child.id) and Client().dead_letter(member)
    assert JobDependency.objects.filter(child_id=child.id).exists()
    assert Client().purge_dead_letters(ids=[child.id, member]) == 2
    assert not JobDependency.objects.filter(child_id=child.id).exists()
    assert not JobWait.objects.filter(job_id=child.id).exists()
    assert not BatchMember.objects.filter(job_id=member).exists()
    assert Client().batch_progress(batch_id).failed == 1  # the count stays


# -- pruning ----------------------------------------------------------------------------------
def _prune() -> int:
    from awa_django.storage.sql import maintenance as maintenance_sql

    return maintenance_sql.job_prune_terminal(
        completed_seconds=60, failed_seconds=60, limit=100
    ).run("default")


def test_pruning_keeps_a_parent_while_a_child_of_it_has_not_ended() -> None:
    import datetime as dt

    from django.utils import timezone

    from awa_django.storage.workflows import JobDependency

    done = awa_django.enqueue(Step("done"))
    pending = awa_django.enqueue(Step("pending"), run_at=timezone.now() + dt.timedelta(hours=1))
    child = awa_django.enqueue(Step("child"), after=[done, pending])
    plain = awa_django.enqueue(Step("plain"))
    drain()
    long_ago = timezone.now() - dt.timedelta(hours=2)
    Job.objects.filter(id__in=[done.id, plain.id]).update(finalized_at=long_ago)
    assert _prune() == 1  # the plain job; the parent stays: its child still waits
    assert Job.objects.filter(id=done.id).exists()
    Job.objects.filter(id=pending.id).update(state="available", run_at=timezone.now())
    drain()
    assert state(child.id) == "completed"
    assert [p.result for p in Client().parents(child.id)] == [{"from": "done"}, {"from": "pending"}]
    Job.objects.filter(id__in=[pending.id, child.id]).update(finalized_at=long_ago)
    assert _prune() == 3  # every child ended: the parents go, and the child with its rows
    assert not JobDependency.objects.filter(child_id=child.id).exists()
    assert not JobWait.objects.filter(job_id=child.id).exists()


def test_the_pruner_drops_a_finished_batch_once_no_member_of_it_is_left() -> None:
    """Members go with their jobs; the batch row then waits out the completed retention
    from its last member's end. A batch with a member left, finished too recently, or not
    finished stays."""
    import datetime as dt

    from django.utils import timezone

    from awa_django.storage.workflows import Batch, BatchMember
    from awa_django.worker.maintenance.pruner import Pruner
    from tests.runtime_db import with_db

    gone = awa_django.batch([Step("g1"), Step("g2")], on_complete=Step("g-done"))
    kept = awa_django.batch([Step("k1")])
    recent = awa_django.batch([Step("r1")])
    later = timezone.now() + dt.timedelta(hours=1)
    unfinished = awa_django.batch([awa_django.step(Step("u1"), run_at=later)])
    drain()
    long_ago = timezone.now() - dt.timedelta(hours=3)
    Batch.objects.filter(id__in=[gone, kept]).update(finished_at=long_ago)
    members = BatchMember.objects.filter(batch_id__in=[gone, recent]).values("job_id")
    Job.objects.filter(id__in=members).update(finalized_at=long_ago)
    callback = Batch.objects.get(id=gone).on_complete_id
    assert callback is not None
    Job.objects.filter(id=callback).update(finalized_at=long_ago)

    async def prune(db: Any) -> int:
        return await Pruner(db, completed_retention=3600, failed_retention=3600).prune_all()

    assert with_db(prune) == 4  # g1, g2, their callback, r1
    assert set(Batch.objects.values_list("id", flat=True)) == {kept, recent, unfinished}
    assert not BatchMember.objects.filter(batch_id__in=[gone, recent]).exists()
    Job.objects.filter(id__in=Client().batch_members(kept)).update(finalized_at=long_ago)
    assert with_db(prune) == 1  # k1, then its batch in the same pass
    assert set(Batch.objects.values_list("id", flat=True)) == {recent, unfinished}


# -- cost: a job outside any workflow calls nothing -----------------------------------------
def _workflow_calls(cursor: Any) -> int:
    cursor.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
        "WHERE funcname LIKE 'awa_workflow%%'"
    )
    return int(cursor.fetchone()[0])


def test_a_job_outside_any_workflow_runs_no_workflow_function() -> None:
    """The triggers' WHEN clauses stop at the flags: enqueue, claim, complete, cancel,
    retry and delete of plain jobs call no trigger function (pg_stat_xact_user_functions
    counts PL/pgSQL calls of this transaction); one parent's completion does."""
    from django.db import connection

    from awa_django.storage.sql import jobs as jobs_sql

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL track_functions = 'pl'")
        plain = [awa_django.enqueue(Step(f"p{i}")).id for i in range(3)]
        awa_django.enqueue_many([Step(f"m{i}") for i in range(70)])  # the COPY path
        claimed = jobs_sql.job_claim_many(
            queue=QUEUE, limit=2, worker_id="cost", deadline_seconds=60, lease_now=True
        ).run("default")
        jobs_sql.job_complete_many(
            ids=[r.id for r in claimed], leases=[r.run_lease for r in claimed], results=[None, None]
        ).run("default")
        Client().cancel(plain[2])
        Client().retry(plain[2])
        Job.objects.filter(id__in=plain).delete()
        assert _workflow_calls(cursor) == 0
        parent = awa_django.enqueue(Step("parent"), queue="wf-cost")
        awa_django.enqueue(Step("child"), after=[parent])
        Client().cancel(parent.id)
        assert _workflow_calls(cursor) > 0


# -- the rest of the API ----------------------------------------------------------------------
def test_a_unique_job_cannot_wait_on_parents() -> None:
    parent = awa_django.enqueue(Step("p"))
    before = Job.objects.count()
    with pytest.raises(InvalidDependency, match="unique"):
        awa_django.enqueue(Step("c"), after=[parent], unique=awa_django.UniqueOpts())
    assert Job.objects.count() == before


def test_aenqueue_takes_after() -> None:
    import asyncio

    parent = awa_django.enqueue(Step("p"))

    async def enqueue_child() -> awa_django.JobSnapshot:
        from asgiref.sync import sync_to_async
        from django.db import connections

        row = await awa_django.aenqueue(Step("c"), after=[parent], on_parent_failure="run")
        # The async twin ran in asgiref's sync thread: close its connection there.
        await sync_to_async(connections.close_all)()
        return row

    child = asyncio.run(enqueue_child())
    assert child.state == "waiting_parents"
    assert Client().children(parent.id) == [child.id]
    assert [(p.id, p.state) for p in Client().parents(child.id)] == [(parent.id, None)]


def test_a_batch_whose_members_all_complete_runs_on_success_and_on_complete_once() -> None:
    client = Client()
    batch_id = client.batch(
        [Step("m1"), awa_django.step(Step("m2"), priority=1)],
        on_success=Step("success"),
        on_complete=Step("complete"),
    )
    members = client.batch_members(batch_id)
    assert len(members) == 2 and all(Job.objects.get(id=m).has_dependents for m in members)
    drain()
    assert sorted(names()) == ["complete", "m1", "m2", "success"]
    assert names()[-2:] in (["success", "complete"], ["complete", "success"])
    progress = client.batch_progress(batch_id)
    assert (progress.completed, progress.pending, progress.is_finished) == (2, 0, True)


def test_cancelling_a_batch_cancels_its_waiting_members_and_callbacks() -> None:
    import datetime as dt

    from django.utils import timezone

    later = timezone.now() + dt.timedelta(hours=1)
    batch_id = awa_django.batch(
        [Step("m1"), awa_django.step(Step("m2"), run_at=later)], on_complete=Step("complete")
    )
    drain()  # m1 completes; m2 is scheduled
    cancelled = Client().cancel_batch(batch_id)
    progress = Client().batch_progress(batch_id)
    assert sorted(r.id for r in cancelled) == sorted(
        [Client().batch_members(batch_id)[1], progress.on_complete_id or 0]
    )
    assert (progress.completed, progress.cancelled, progress.is_finished) == (1, 1, True)
    drain()
    assert names() == ["m1"]


def test_an_unknown_batch_is_a_typed_error() -> None:
    with pytest.raises(awa_django.BatchNotFound):
        Client().batch_progress(10**12)


def test_a_retried_batch_member_reopens_the_batch_and_its_on_success() -> None:
    batch_id = awa_django.batch([Step("ok"), Step("bad", "fail")], on_success=Step("success"))
    drain()
    progress = Client().batch_progress(batch_id)
    assert (progress.failed, progress.is_finished) == (1, True)
    assert state(progress.on_success_id) == "cancelled"
    bad = Client().batch_members(batch_id)[1]
    Job.objects.filter(id=bad).update(args={"name": "bad", "mode": "complete"})
    Client().retry(bad)
    progress = Client().batch_progress(batch_id)
    assert (progress.failed, progress.finished_at) == (0, None)
    drain()
    assert names()[-1] == "success"
    assert Client().batch_progress(batch_id).completed == 2
