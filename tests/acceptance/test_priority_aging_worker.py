"""Priority aging with a real `manage.py awa_worker` (decision 018): a batch job at priority
4 behind a continuous stream of priority-1 jobs starts within its aging bound, ahead of
stream jobs enqueued before it started. Without aging it would wait for the stream to end.
"""

from __future__ import annotations

import pytest

import awa_django
from awa_django.conf import AGING_TOP_PRIORITY
from awa_django.storage.models import Job
from testproject.testjobs.jobs import AccSleep
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

INTERVAL = 1.0  # seconds per priority level
BACKLOG = 6  # priority-1 jobs kept waiting at all times
# The documented bound (docs/worker.md): reaching the top takes (p - top) intervals, and
# the pass that lifts it runs at most one interval after that. The allowance covers the
# first election and a claim on a machine other test suites load.
BOUND = (4 - AGING_TOP_PRIORITY + 1) * INTERVAL + 3.0


def top_up() -> None:
    waiting = Job.objects.filter(queue="acc", state="available", priority=1).count()
    for _ in range(BACKLOG - waiting):
        awa_django.enqueue(AccSleep(seconds=0.05), priority=1)


def test_a_batch_job_behind_a_stream_of_urgent_jobs_starts_within_its_aging_bound(
    start_worker,
):
    top_up()
    start_worker("--queue", "acc=1", env={"AWA_PRIORITY_AGING": f"acc={INTERVAL}"})
    wait_until(lambda: Job.objects.filter(queue="acc", state="completed").exists(), 30)
    batch = awa_django.enqueue(AccSleep(seconds=0), priority=4)

    def started() -> Job | None:
        top_up()  # the stream never runs dry: without aging the batch job would starve
        job = Job.objects.get(pk=batch.id)
        return job if job.attempted_at is not None else None

    job = wait_until(started, timeout=BOUND + 20, what="the batch job to start")
    assert job.original_priority == 4 and job.priority == AGING_TOP_PRIORITY
    assert job.attempted_at is not None
    waited = (job.attempted_at - job.created_at).total_seconds()
    assert waited <= BOUND, f"started after {waited:.2f}s; the bound is {BOUND}s"
    overtaken = Job.objects.filter(
        queue="acc", priority=1, created_at__lt=job.attempted_at
    ).exclude(attempted_at__lt=job.attempted_at)
    assert overtaken.exists()  # urgent jobs that were waiting when it started
