"""A child that a parent's failure cancels announces `Cancelled` from a real worker
(decision 046): the parent fails in the worker's attempt, the fan-in trigger cancels the
child and its own waiting child in that outcome's transaction and writes their outbox
rows, and the worker's leader announces each, once, to the kind's hook."""

from __future__ import annotations

import pytest

import awa_django
from awa_django.storage.models import Job
from awa_django.storage.workflows import EventAnnouncement
from testproject.testjobs.jobs import AccFollowed, AccOutcome
from testproject.testjobs.models import HookCall
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

REASON = "cancelled: a parent failed"


def cancels(job_id: int) -> list[tuple[str, str, str]]:
    calls = HookCall.objects.filter(job_id=job_id, event="Cancelled")
    return list(calls.values_list("event", "state", "detail"))


def test_a_hook_hears_each_policy_cancelled_child_once(start_worker):
    parent = awa_django.enqueue(AccOutcome("fail"))
    child = awa_django.enqueue(AccFollowed(1), after=[parent], on_parent_failure="cancel")
    grandchild = awa_django.enqueue(AccFollowed(2), after=[child], on_parent_failure="cancel")
    worker = start_worker("--queue", "acc=2")
    wait_until(
        lambda: (cancels(child.id) and cancels(grandchild.id)) or None,
        timeout=60,
        what="the Cancelled hooks of the child and the grandchild",
    )
    assert worker.stop() == 0  # a graceful stop delivers whatever is still queued
    assert Job.objects.get(id=parent.id).state == "failed"
    for job_id in (child.id, grandchild.id):
        assert Job.objects.get(id=job_id).state == "cancelled"
        assert cancels(job_id) == [("Cancelled", "cancelled", REASON)]  # exactly once
        # Never ran, so no other event either.
        assert list(HookCall.objects.filter(job_id=job_id).values_list("event", flat=True)) == [
            "Cancelled"
        ]
    assert not EventAnnouncement.objects.exists()
