"""Workflows (decision 043): enqueue after parents, the fan-in trigger, the policies,
chains, groups, batches, cascade cancel, retry restoring children, and the typed errors
of bad input. Runs handlers inline through `testing.drain()`; the parent outcome by
policy conformance on both schedulers is in test_workflow_conformance.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction

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


def state(job_id: int) -> str:
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
