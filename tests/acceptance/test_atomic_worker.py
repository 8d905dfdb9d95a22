"""Exactly-once database effects with real worker processes (issue 11, decision 015): an
atomic handler's rows and a completion's follow-up jobs count once, even when a paused
worker comes back after its attempt was rescued and re-run elsewhere."""

from __future__ import annotations

import signal

import pytest

import awa_django
from awa_django.storage.models import Job
from testproject.testjobs.jobs import AccAtomicInvoice, AccFollowed
from testproject.testjobs.models import Execution, HookCall, Invoice
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def state_of(job_id: int) -> str:
    return Job.objects.get(id=job_id).state


def started(job_id: int) -> bool:
    return Execution.objects.filter(job_id=job_id).exists()


def follow_ups(n: int) -> list[Job]:
    """The AccNoop(n) jobs a completion enqueued."""
    return list(Job.objects.filter(kind="acc_noop", args={"n": n}))


def _pause_past_rescue(start_worker, job_id: int):
    """Start a worker on `job_id`, SIGSTOP it mid-handler, let a second worker rescue and
    complete the job, then SIGCONT the first and wait for its stale outcome."""
    first = start_worker("--queue", "acc=1", "--worker-id", "first")
    wait_until(lambda: started(job_id), what="first attempt to start")
    first.signal(signal.SIGSTOP)
    second = start_worker("--queue", "acc=1", "--worker-id", "second")
    wait_until(lambda: state_of(job_id) == "completed", timeout=30, what="rescue and re-run")
    done = Job.objects.get(id=job_id)
    assert done.attempt == 2 and done.attempted_by[-1] == "second"
    first.signal(signal.SIGCONT)
    wait_until(lambda: "is stale" in first.output(), timeout=20, what="stale outcome log")
    return first, second, done


def test_a_rescued_atomic_handler_leaves_one_row_and_one_follow_up(start_worker):
    job = awa_django.enqueue(AccAtomicInvoice(order_id=71, seconds=2.0))
    first, second, done = _pause_past_rescue(start_worker, job.id)
    # The first attempt wrote its invoice and ran past its guard: its transaction rolled
    # back, so only the second attempt's invoice exists.
    leases = sorted(Execution.objects.filter(job_id=job.id).values_list("run_lease", flat=True))
    assert len(leases) == 2 and leases[-1] == done.run_lease  # one run per claim
    invoices = list(Invoice.objects.filter(order_id=71).values_list("run_lease", "pid"))
    assert invoices == [(done.run_lease, second.pid)]
    after = Job.objects.get(id=job.id)
    assert (after.state, after.run_lease, after.finalized_at) == (
        "completed",
        done.run_lease,
        done.finalized_at,
    )
    assert len(follow_ups(71)) == 1  # enqueued with the one completion that committed
    wait_until(lambda: follow_ups(71)[0].state == "completed", what="the follow-up job")
    assert first.stop() == 0 and second.stop() == 0
    completions = HookCall.objects.filter(job_id=job.id, event="Completed")
    assert list(completions.values_list("pid", "run_lease")) == [(second.pid, done.run_lease)]


def test_a_stale_plain_completion_enqueues_no_follow_up(start_worker):
    job = awa_django.enqueue(AccFollowed(n=72, seconds=2.0))
    first, second, _ = _pause_past_rescue(start_worker, job.id)
    assert Execution.objects.filter(job_id=job.id).count() == 2  # not atomic: ran twice
    assert len(follow_ups(72)) == 1
    assert first.stop() == 0 and second.stop() == 0
    assert len(follow_ups(72)) == 1


def test_an_atomic_handler_that_raises_after_writing_leaves_no_row(start_worker):
    job = awa_django.enqueue(AccAtomicInvoice(order_id=73, fail=True), max_attempts=1)
    worker = start_worker("--queue", "acc=1")
    wait_until(lambda: state_of(job.id) == "failed", what="the failure")
    failed = Job.objects.get(id=job.id)
    assert "failed after writing its invoice" in failed.errors[-1]["error"]
    assert Execution.objects.filter(job_id=job.id).count() == 1  # it ran, and wrote
    assert not Invoice.objects.filter(order_id=73).exists()
    assert follow_ups(73) == []
    assert worker.stop() == 0
