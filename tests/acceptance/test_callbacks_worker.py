"""Callbacks across processes: a worker parks or waits, this process resolves."""

from __future__ import annotations

import pytest

import awa_django
from awa_django.events import Completed, Event
from awa_django.storage.models import ActiveLease, Job
from testproject.testjobs.jobs import AccAsyncWaitInPlace, AccPark, AccWaitInPlace
from testproject.testjobs.models import HookCall
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def row(job_id: int) -> Job:
    return Job.objects.get(id=job_id)


def test_parked_job_frees_its_slot_and_completes_from_the_client(start_worker, clean_hooks):
    seen: list[Event[AccPark]] = []
    awa_django.on_event(AccPark, seen.append, events={Completed})
    parked = awa_django.enqueue(AccPark())
    start_worker("--queue", "acc=1")
    wait_until(lambda: row(parked.id).state == "waiting_external", what="park")
    assert not ActiveLease.objects.filter(job_id=parked.id).exists()  # slot and lease freed
    wait_until(HookCall.objects.filter(job_id=parked.id, event="WaitingForCallback").exists)
    other = awa_django.enqueue(AccPark())  # the freed slot takes the next job
    wait_until(lambda: row(other.id).state == "waiting_external", what="second park")

    parked_callback = row(parked.id).callback_id
    assert parked_callback is not None
    done = awa_django.Client().complete_external(parked_callback, {"ok": True})
    assert done.state == "completed"
    assert [e.job.id for e in seen] == [parked.id]  # dispatched here, in the resolving process
    assert isinstance(seen[0], Completed) and seen[0].duration.total_seconds() == 0
    first_callback = seen[0].job.callback_id or parked_callback
    with pytest.raises(awa_django.CallbackNotFound):
        awa_django.Client().complete_external(first_callback, {})


def test_callback_resolved_before_the_handler_parks_is_one_outcome(start_worker):
    job = awa_django.enqueue(AccPark(hold=True))
    worker = start_worker("--queue", "acc=1")
    callback_id = wait_until(lambda: row(job.id).callback_id, what="callback registered")
    awa_django.Client().complete_external(callback_id, None)
    wait_until(lambda: "is stale" in worker.output(), what="the park to find nothing")
    assert row(job.id).state == "completed"
    assert not HookCall.objects.filter(job_id=job.id, event="WaitingForCallback").exists()
    assert worker.stop() == 0


@pytest.mark.parametrize("args", [AccWaitInPlace(), AccAsyncWaitInPlace()])
def test_wait_for_callback_resumes_the_handler_in_place(start_worker, args):
    job = awa_django.enqueue(args)
    worker = start_worker("--queue", "acc=1")
    wait_until(lambda: row(job.id).state == "waiting_external", what="sequential wait")
    # It keeps its slot, and its heartbeat writes its lease (without a deadline: waiting
    # is not running).
    wait_until(
        lambda: ActiveLease.objects.filter(job_id=job.id, deadline_at=None).exists(),
        what="the lease of the waiting attempt",
    )
    callback_id = row(job.id).callback_id
    assert callback_id is not None
    awa_django.Client().resume_external(callback_id, {"answer": 42})
    wait_until(lambda: row(job.id).state == "completed", what="resumed handler to finish")
    finished = row(job.id)
    assert finished.result == {"payload": {"answer": 42}}
    # The payload was taken from its own column: nothing is left behind, in it or metadata.
    assert finished.callback_result is None and finished.metadata == {}
    assert finished.attempt == 1  # resumed in place, not re-run
    assert worker.stop() == 0


def test_an_expired_callback_is_rescued_in_the_leader_with_its_reason(start_worker):
    job = awa_django.enqueue(AccPark(timeout=0.5), max_attempts=1)
    start_worker("--queue", "acc=1")
    wait_until(lambda: row(job.id).state == "failed", timeout=20, what="callback timeout")
    assert row(job.id).errors[-1]["error"] == "callback timed out"
    # Its last attempt: one event for the one transition, Exhausted with the rescue's
    # reason, and no Rescued (decision 035).
    exhausted = HookCall.objects.filter(job_id=job.id, event="Exhausted")
    wait_until(exhausted.exists, what="Exhausted(reason=expired_callback) from the leader")
    assert exhausted.get().detail == "expired_callback"
    assert list(
        HookCall.objects.filter(job_id=job.id)
        .exclude(event="Started")
        .order_by("id")
        .values_list("event", flat=True)
    ) == ["WaitingForCallback", "Exhausted"]


def test_a_sequential_wait_whose_job_is_cancelled_says_it_was_cancelled(start_worker):
    job = awa_django.enqueue(AccWaitInPlace())
    worker = start_worker("--queue", "acc=1")
    wait_until(lambda: row(job.id).state == "waiting_external", what="sequential wait")
    awa_django.Client().cancel(job.id)
    wait_until(
        lambda: "was cancelled while waiting for its callback" in worker.output(),
        what="the waiting handler to learn of the cancel",
    )
    assert row(job.id).state == "cancelled"  # the handler's later outcome is stale
    assert worker.stop() == 0
