"""A real worker whose completion the database refuses once (a trigger's exception, not a
value it cannot hold) completes the job on a later attempt, with one terminal transition
and one `Completed` hook call, for a plain handler (the batched completer) and an atomic
one (its writes and follow-up committed once, with the completion that landed). Decision
036; the trigger is tests/refusal_trigger.py."""

from __future__ import annotations

import pytest

import awa_django
from awa_django.storage.models import Job
from testproject.testjobs.jobs import AccAtomicInvoice, AccSleep
from testproject.testjobs.models import Invoice
from tests.refusal_trigger import Refuse, refuse
from tests.waiting import wait_until

from .test_hostile_worker import executions_per_job, outcome_hooks

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

__all__ = ["refuse"]  # the fixture, imported for this module's tests


def completed(job_id: int) -> bool:
    return Job.objects.get(id=job_id).state == "completed"


def test_a_plain_completion_refused_once_completes_on_the_next_attempt(
    refuse: Refuse, start_worker
):
    job = awa_django.enqueue(AccSleep(0.0))
    refuse(job.id, "completed", "P0001")
    worker = start_worker("--queue", "acc=2")
    wait_until(lambda: completed(job.id), timeout=30, what="the job to complete")
    row = Job.objects.get(id=job.id)
    assert row.attempt == 2 and executions_per_job() == {job.id: 2}
    [entry] = row.errors
    assert entry["type"] == "awa_django.exceptions.OutcomeRefused" and entry["attempt"] == 1
    wait_until(lambda: len(outcome_hooks(job.id)) == 2, what="the hook calls")
    assert [event for event, _ in outcome_hooks(job.id)] == ["Retried", "Completed"]
    assert "the database refused its outcome, retried" in worker.output()
    assert worker.stop() == 0
    assert [event for event, _ in outcome_hooks(job.id)] == ["Retried", "Completed"]


def test_an_atomic_completion_refused_once_commits_its_writes_once(refuse: Refuse, start_worker):
    job = awa_django.enqueue(AccAtomicInvoice(order_id=7))
    refuse(job.id, "completed", "23514")  # a check constraint: the row's, not the value's
    worker = start_worker("--queue", "acc=2")
    wait_until(lambda: completed(job.id), timeout=30, what="the job to complete")
    row = Job.objects.get(id=job.id)
    assert row.attempt == 2 and executions_per_job()[job.id] == 2
    # The refused attempt's invoice was rolled back with it; the landed one committed.
    assert list(Invoice.objects.values_list("order_id", "run_lease")) == [(7, row.run_lease)]
    assert Job.objects.filter(kind="acc_noop", args__n=7).count() == 1  # one follow-up
    wait_until(lambda: len(outcome_hooks(job.id)) == 2, what="the hook calls")
    assert [event for event, _ in outcome_hooks(job.id)] == ["Retried", "Completed"]
    assert worker.stop() == 0
