"""Where workflows (decision 043) meet per-key concurrency (decision 045): both move jobs in
triggers on awa_jobs_hot, so a child released by its parents must still pass admission, a
keyed parent's completion must both free its slot and release its children, and a
cancelled flow must free the slots its jobs held. Each rule holds alone in its own suite;
these tests hold them together.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import awa_django
from awa_django import Client
from awa_django.bulk import JobFilter
from awa_django.execution.inline import run_available
from awa_django.keys import key_digest
from awa_django.storage.models import Job, KeySlot

pytestmark = pytest.mark.django_db

QUEUE = "seams-flow-keys"


@dataclass
class Tenant:
    tenant: str
    n: int = 0


@awa_django.job(Tenant, queue=QUEUE, concurrency_key=lambda a: a.tenant, max_in_flight=1)
def tenant_job(job: awa_django.JobContext[Tenant]) -> None:
    return None


@dataclass
class Plain:
    n: int


@awa_django.job(Plain, queue=QUEUE)
def plain_job(job: awa_django.JobContext[Plain]) -> None:
    return None


@dataclass
class Doomed:
    n: int


@awa_django.job(Doomed, queue=QUEUE, max_attempts=1)
def doomed_job(job: awa_django.JobContext[Doomed]) -> None:
    raise awa_django.TerminalError("no")


def state(job_id: int) -> str:
    return Job.objects.get(id=job_id).state


def holders(key: str) -> list[int]:
    rows = KeySlot.objects.filter(key_digest=key_digest(key), job_id__isnull=False)
    return sorted(job_id for job_id in rows.values_list("job_id", flat=True) if job_id)


def run_one(expected_id: int) -> None:
    """Run exactly one job of the queue and check it was `expected_id`."""
    assert state(expected_id) == "available"
    assert run_available(QUEUE, limit=1) == 1
    assert state(expected_id) == "completed"


def test_a_keyed_child_released_by_its_parents_waits_for_its_key_slot() -> None:
    busy = awa_django.enqueue(Tenant("acme", 1)).id  # holds acme's only slot
    parent = awa_django.enqueue(Plain(1), priority=1).id  # runs before `busy`
    child = awa_django.enqueue(Tenant("acme", 2), after=[parent]).id
    assert state(child) == "waiting_parents" and holders("acme") == [busy]

    run_one(parent)
    # Released by its parent, but acme's slot is taken: admission sends it to wait.
    assert state(child) == "waiting_slot" and holders("acme") == [busy]

    run_one(busy)
    assert state(child) == "available" and holders("acme") == [child]
    run_one(child)
    assert holders("acme") == []


def test_a_keyed_parent_frees_its_slot_for_its_own_keyed_child() -> None:
    """One completion runs both triggers: the release of the parent's slot and the fan-in
    that makes the child available. Whichever runs first, the child ends up admitted into
    the slot the parent gave up, and never two holders at once."""
    parent = awa_django.enqueue(Tenant("acme", 1)).id
    child = awa_django.enqueue(Tenant("acme", 2), after=[parent]).id
    assert holders("acme") == [parent]

    run_one(parent)
    assert state(child) == "available" and holders("acme") == [child]


def test_a_child_already_released_at_enqueue_is_admitted_or_waits() -> None:
    done = awa_django.enqueue(Plain(1)).id
    run_one(done)
    busy = awa_django.enqueue(Tenant("acme", 1)).id
    child = awa_django.enqueue(Tenant("acme", 2), after=[done]).id
    assert state(child) == "waiting_slot" and holders("acme") == [busy]
    other = awa_django.enqueue(Tenant("globex", 1), after=[done]).id
    assert state(other) == "available" and holders("globex") == [other]


def test_cancelling_a_flow_frees_the_slots_of_its_admitted_jobs() -> None:
    root = awa_django.enqueue(Tenant("acme", 1)).id
    child = awa_django.enqueue(Tenant("globex", 1), after=[root]).id
    waiting = awa_django.enqueue(Tenant("acme", 2)).id
    assert holders("acme") == [root] and state(waiting) == "waiting_slot"

    Client().cancel(root, cascade=True)
    assert state(root) == "cancelled" and state(child) == "cancelled"
    # acme's slot went from the cancelled root to the next job of the key.
    assert holders("acme") == [waiting] and state(waiting) == "available"
    assert holders("globex") == []


def test_a_parent_failing_for_good_cancels_a_waiting_keyed_child_without_a_slot() -> None:
    parent = awa_django.enqueue(Doomed(1)).id
    child = awa_django.enqueue(Tenant("acme", 1), after=[parent]).id
    assert run_available(QUEUE, limit=1) == 1
    assert state(parent) == "failed" and state(child) == "cancelled"
    assert holders("acme") == []  # it never held one, and none is left behind
    later = awa_django.enqueue(Tenant("acme", 2)).id
    assert state(later) == "available" and holders("acme") == [later]


def test_a_batch_of_keyed_members_runs_one_at_a_time_and_calls_back_once() -> None:
    members = [Tenant("acme", n) for n in range(3)]
    batch_id = awa_django.batch(members, on_complete=Plain(99))
    progress = Client().batch_progress(batch_id)
    assert progress.total == 3 and progress.on_complete_id is not None
    keyed = sorted(
        Job.objects.filter(queue=QUEUE, kind=Job.objects.get(id=holders("acme")[0]).kind)
        .exclude(state="completed")
        .values_list("id", flat=True)
    )
    assert len(keyed) == 3
    for _ in range(3):
        (holder,) = holders("acme")
        assert sum(state(i) == "available" for i in keyed) == 1
        run_one(holder)
    callback = progress.on_complete_id
    assert state(callback) == "available"
    run_one(callback)
    assert Client().batch_progress(batch_id).completed == 3


@pytest.mark.parametrize("how", ["retry", "retry_many", "bulk_retry"])
def test_a_child_cancelled_while_waiting_and_retried_waits_for_its_parents_again(
    how: str,
) -> None:
    """Cancel and retry are operators' moves on one row; the child's parents still decide
    when it runs. Made available by the retry, it ran before its parent and took its key's
    slot from the parent's own line."""
    parent = awa_django.enqueue(Plain(1)).id
    child = awa_django.enqueue(Tenant("acme", 1), after=[parent]).id
    Client().cancel(child)
    retry = {
        "retry": lambda: Client().retry(child),
        "retry_many": lambda: Client().retry_many([child]),
        "bulk_retry": lambda: Client().bulk_retry(JobFilter(queue=QUEUE, kind=kind_of(child))),
    }[how]
    retry()
    assert state(child) == "waiting_parents" and holders("acme") == []

    run_one(parent)  # the child is released by its parent, as if never cancelled
    run_one(child)
    assert holders("acme") == []


def test_a_retried_child_whose_parents_all_ended_runs_at_once() -> None:
    # A failed parent does not hold an operator's retry: it ended, and the retry is asked.
    parent = awa_django.enqueue(Doomed(1)).id
    child = awa_django.enqueue(Tenant("acme", 1), after=[parent]).id
    assert run_available(QUEUE, limit=1) == 1
    assert state(child) == "cancelled"
    Client().retry(child)
    assert state(child) == "available" and holders("acme") == [child]


def kind_of(job_id: int) -> str:
    return Job.objects.get(id=job_id).kind


@pytest.mark.parametrize("how", ["retry_many", "bulk_retry"])
def test_a_parent_and_the_child_its_failure_cancelled_retried_together_run_in_order(
    how: str,
) -> None:
    """ "Retry everything failed or cancelled": the failed parent and the child its policy
    cancelled are retried by one statement. The child waited on no pending parent when
    the statement read it, and ran beside (or before) its parent."""
    parent = awa_django.enqueue(Doomed(1)).id
    child = awa_django.enqueue(Tenant("acme", 1), after=[parent]).id
    grandchild = awa_django.enqueue(Plain(2), after=[child]).id
    assert run_available(QUEUE, limit=1) == 1
    assert [state(parent), state(child), state(grandchild)] == ["failed", *["cancelled"] * 2]
    if how == "retry_many":
        Client().retry_many([parent, child, grandchild])
    else:
        Client().bulk_retry(JobFilter(queue=QUEUE))
    assert state(parent) == "available"
    assert state(child) == state(grandchild) == "waiting_parents"
    assert holders("acme") == []


def test_a_cancel_after_an_operators_retry_is_not_undone_by_the_parents_retry() -> None:
    """A child the policy cancelled and the operator retried is the operator's: cancelled
    again (by anyone), a retry of its failed parent must leave it cancelled (decision 043:
    only the policy's cancels are restored)."""
    parent = awa_django.enqueue(Doomed(1)).id
    child = awa_django.enqueue(Plain(1), after=[parent]).id
    assert run_available(QUEUE, limit=1) == 1
    assert state(child) == "cancelled"
    Client().retry(child)
    Client().cancel(child)
    Client().retry(parent)
    assert state(child) == "cancelled"
