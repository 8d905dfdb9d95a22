"""An outcome the database refuses once, for a reason of its own, does not fail the job for
good (decision 036); one it refuses for a value it cannot hold (SQLSTATE class 22) still
does. Both schedulers of the attempt lifecycle (the inline runner and the worker's
`Executor` with its batched `Completer`), plain and atomic handlers, and every outcome
write they share (complete, retry, cancel, snooze).

The refusal is a real PostgreSQL trigger on `awa_jobs_hot` (tests/refusal_trigger.py).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import pytest
from django.utils import timezone

import awa_django
from awa_django.events import Completed, Event
from awa_django.execution.context import JobContext
from awa_django.execution.inline import run_available
from awa_django.results import Cancel, RetryAfter, Snooze
from awa_django.storage.models import ActiveLease, Job
from awa_django.testing import capture_events
from testproject.testjobs.models import Execution
from tests.refusal_trigger import refuse

from .test_attempt_conformance import (
    ATTEMPT_TIMEOUT,
    QUEUE,
    _reset_observations,
    _run_in_worker,
    calls,
    enqueue,
    names,
    scheduler,
)

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["_reset_observations", "refuse", "scheduler"]  # fixtures, imported for these tests

REFUSED = "awa_django.exceptions.OutcomeRefused"
NOT_STORED = "awa_django.exceptions.OutcomeNotStored"


def run_attempt(scheduler: str, job_id: int) -> tuple[Job, list[Event]]:
    """Claim and run the one available job `job_id` on `scheduler` (as the conformance
    suite does, for an attempt that may not be the first); the committed row and the
    events its hooks received."""
    with capture_events() as captured:
        if scheduler == "inline":
            assert run_available(QUEUE) == 1
        else:
            asyncio.run(asyncio.wait_for(_run_in_worker(), ATTEMPT_TIMEOUT))
    assert not ActiveLease.objects.filter(job_id=job_id).exists()
    return Job.objects.get(id=job_id), list(captured.events)


def due_now(job_id: int) -> None:
    """The retry's back-off, skipped: what the leader's promotion does once it passed."""
    Job.objects.filter(id=job_id, state="retryable").update(
        state="available", run_at=timezone.now()
    )


def refused_entry(job: Job, kind: str = REFUSED) -> dict[str, Any]:
    (entry,) = job.errors
    assert entry["type"] == kind
    assert "test: the database refuses this outcome" in entry["error"]
    return entry


@dataclass
class RefusedAtomic:
    n: int = 0


@awa_django.job(RefusedAtomic, queue=QUEUE, max_attempts=3, atomic=True)
def refused_atomic(job: JobContext[RefusedAtomic]) -> None:
    """An atomic handler with a write of its own, rolled back with a refused outcome."""
    calls.append(job.id)
    Execution.objects.create(job_id=job.id, run_lease=job.run_lease, pid=os.getpid())


# -- a refusal of the database's own: the attempt is retried ------------------------------
@pytest.mark.parametrize(
    "errcode",
    [
        "P0001",  # a trigger's RAISE EXCEPTION
        "23514",  # a check constraint
        "40001",  # a serialization failure
        "55P03",  # a lock timeout
    ],
)
def test_a_completion_refused_once_completes_on_a_later_attempt(
    scheduler: str, refuse: Any, errcode: str
) -> None:
    job_id = enqueue("complete")
    refuse(job_id, "completed", errcode)
    events: list[Event] = []
    for _ in range(2):
        job, seen = run_attempt(scheduler, job_id)
        events += seen
        if job.state == "completed":
            break
        # The refused completion committed nothing; the attempt ended as a retry.
        assert (job.state, job.attempt) == ("retryable", 1)
        entry = refused_entry(job)
        assert entry["error"].startswith("the database refused the outcome of this attempt: ")
        assert names(seen) == ["Started", "Retried"]
        due_now(job_id)
    job = Job.objects.get(id=job_id)
    assert job.state == "completed"
    assert job.attempt == len(calls)  # every run counted as an attempt
    assert [type(e) for e in events].count(Completed) == 1  # one terminal transition, one hook
    assert "Exhausted" not in names(events)
    if errcode in ("P0001", "23514"):  # never waited out as an outage: a later attempt ran
        assert (job.attempt, calls) == (2, [job_id, job_id])


@pytest.mark.parametrize(
    ("mode", "state", "args"),
    [
        ("retry_after", "retryable", {"seconds": 30}),
        ("cancel", "cancelled", {"note": "asked to"}),
        ("snooze", "scheduled", {"seconds": 30}),
    ],
)
def test_other_outcomes_refused_once_retry_the_attempt(
    scheduler: str, refuse: Any, mode: str, state: str, args: dict[str, Any]
) -> None:
    assert {"retry_after": RetryAfter, "cancel": Cancel, "snooze": Snooze}[mode]
    job_id = enqueue(mode, **args)
    refuse(job_id, state, "P0001")
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt, job.finalized_at is not None) == ("retryable", 1, True)
    refused_entry(job)
    assert names(events) == ["Started", "Retried"]  # the refused outcome's event never came
    due_now(job_id)
    job, events = run_attempt(scheduler, job_id)  # the trigger refused once: now it lands
    assert (job.state, job.attempt) == (state, 2 if mode != "snooze" else 1)
    assert calls == [job_id, job_id]


def test_an_atomic_completion_refused_once_rolls_back_and_completes_later(
    scheduler: str, refuse: Any
) -> None:
    job_id = awa_django.enqueue(RefusedAtomic(1)).id
    refuse(job_id, "completed", "P0001")
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt) == ("retryable", 1)
    refused_entry(job)
    assert names(events) == ["Started", "Retried"]
    assert not Execution.objects.filter(job_id=job_id).exists()  # rolled back with it
    due_now(job_id)
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt) == ("completed", 2)
    assert names(events) == ["Started", "Completed"]
    assert calls == [job_id, job_id]
    # The handler's write committed exactly once: with the completion that landed.
    assert list(Execution.objects.filter(job_id=job_id).values_list("run_lease", flat=True)) == [
        job.run_lease
    ]


def test_a_refusal_on_the_last_attempt_exhausts_the_job(scheduler: str, refuse: Any) -> None:
    job_id = enqueue("complete", max_attempts=1)
    refuse(job_id, "completed", "P0001")
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt) == ("failed", 1)  # attempts stay a hard bound
    entry = refused_entry(job)
    assert "terminal" not in entry
    assert names(events) == ["Started", "Exhausted"]


# -- a value the database cannot hold: failed for good, as before -------------------------
def test_a_completion_refused_for_its_value_fails_for_good(scheduler: str, refuse: Any) -> None:
    job_id = enqueue("complete_with_result")
    refuse(job_id, "completed", "22023", times=100)  # refused whenever it is written
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt, job.result) == ("failed", 1, None)
    entry = refused_entry(job, NOT_STORED)
    assert entry["terminal"] is True
    assert entry["error"].startswith("the outcome of this attempt could not be stored: ")
    assert names(events) == ["Started", "Exhausted"]
    assert calls == [job_id]
