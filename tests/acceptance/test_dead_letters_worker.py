"""Dead letters with real worker processes (docs/dead-letters.md, decision 016): a job of
the dead-letter queue `acc-dead` (AWA_DEAD_LETTER_QUEUES in the workers' environment) that
exhausts its attempts, whose last attempt is rescued, or whose callback times out ends
among the dead letters, not among the jobs, and `Exhausted` says so exactly once."""

from __future__ import annotations

import signal

import pytest

import awa_django
from awa_django.storage.models import DeadLetter, Job
from testproject.testjobs.jobs import AccDeadFail, AccPark, AccSleep
from testproject.testjobs.models import Execution, HookCall
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

QUEUE = "acc-dead"
ENV = {"AWA_DEAD_LETTER_QUEUES": QUEUE}


def dead_letter(job_id: int) -> DeadLetter | None:
    return DeadLetter.objects.filter(id=job_id).first()


def exhausted_hooks(job_id: int) -> list[str]:
    return list(
        HookCall.objects.filter(job_id=job_id, event="Exhausted").values_list("detail", flat=True)
    )


def test_a_job_that_exhausts_its_attempts_moves_to_the_dead_letters(start_worker):
    job = awa_django.enqueue(AccDeadFail(1))
    worker = start_worker("--queue", f"{QUEUE}=2", env=ENV)
    letter = wait_until(lambda: dead_letter(job.id), timeout=60, what="the dead letter")
    assert not Job.objects.filter(id=job.id).exists()
    assert (letter.reason, letter.attempt, letter.queue) == ("max_attempts_exhausted", 2, QUEUE)
    assert [e["attempt"] for e in letter.errors] == [1, 2]
    assert Execution.objects.filter(job_id=job.id).count() == 2
    wait_until(lambda: exhausted_hooks(job.id), timeout=60, what="the Exhausted hook")
    assert worker.stop() == 0
    (detail,) = exhausted_hooks(job.id)  # exactly once, after the commit
    assert detail.startswith("dead_lettered: RuntimeError: acc_dead_fail 1 attempt 2")
    retried = HookCall.objects.filter(job_id=job.id, event="Retried").count()
    assert retried == 1


def test_a_rescued_last_attempt_moves_to_the_dead_letters(start_worker):
    job = awa_django.enqueue(AccSleep(60), queue=QUEUE, max_attempts=1)
    first = start_worker("--queue", f"{QUEUE}=1", "--worker-id", "first", env=ENV)
    wait_until(
        lambda: Execution.objects.filter(job_id=job.id).exists(), timeout=60, what="the attempt"
    )
    first.signal(signal.SIGSTOP)
    second = start_worker("--queue", f"{QUEUE}=1", "--worker-id", "second", env=ENV)
    letter = wait_until(lambda: dead_letter(job.id), timeout=60, what="rescue into dead letters")
    assert letter.reason == "max_attempts_exhausted"
    assert "heartbeat stale" in letter.errors[-1]["error"]
    first.signal(signal.SIGCONT)
    wait_until(lambda: "is stale" in first.output(), timeout=60, what="the stale outcome")
    # The stale attempt moved nothing: the dead letter is as the rescue left it.
    assert DeadLetter.objects.get(id=job.id).errors == letter.errors
    assert not Job.objects.filter(id=job.id).exists()
    assert first.stop() == 0 and second.stop() == 0
    (detail,) = exhausted_hooks(job.id)
    assert detail == "dead_lettered: stale_heartbeat"  # Exhausted carries the rescue's reason (035)


def test_a_callback_that_times_out_on_the_last_attempt_moves_to_the_dead_letters(start_worker):
    job = awa_django.enqueue(AccPark(timeout=0.5), queue=QUEUE, max_attempts=1)
    worker = start_worker("--queue", f"{QUEUE}=1", env=ENV)
    letter = wait_until(lambda: dead_letter(job.id), timeout=60, what="callback timeout")
    assert letter.reason == "callback_timeout"
    assert letter.errors[-1]["error"] == "callback timed out"
    assert not Job.objects.filter(id=job.id).exists()
    wait_until(lambda: exhausted_hooks(job.id), timeout=60, what="the Exhausted hook")
    assert worker.stop() == 0
    (detail,) = exhausted_hooks(job.id)
    assert detail == "dead_lettered: expired_callback"  # the rescue's reason (035)
