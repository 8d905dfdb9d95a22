"""Issue 26, item 1, with real worker processes: a worker without a kind's handler never
keeps its jobs from a worker that has it, whichever holds the queue's waker role and
however many of them run (decision 032). Workers started with AWA_TEST_WITHOUT_KINDS=
acc_rolling lack the handler of `acc_rolling` (testproject/testjobs/jobs.py)."""

from __future__ import annotations

import time

import pytest

import awa_django
from awa_django.storage.models import Job, WorkerInstance
from testproject.testjobs.jobs import AccRolling
from testproject.testjobs.models import Execution
from tests.waiting import wait_until

from .test_worker_process import listening, workers_whose_last_statement

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WITHOUT_ROLLING = {"AWA_TEST_WITHOUT_KINDS": "acc_rolling"}


def role_holders() -> int:
    """Processes that hold a waker role of `acc`: only a holder LISTENs for its hints."""
    return workers_whose_last_statement("query = 'LISTEN \"awa:acc\"'")


def registered(*worker_ids: str) -> bool:
    return WorkerInstance.objects.filter(worker_id__in=worker_ids).count() == len(worker_ids)


def assert_run_once_by(ids: list[int], worker_id: str) -> None:
    """Each job completed at its first attempt, claimed only by `worker_id`, never handed
    back, its handler run once."""
    for row in Job.objects.filter(id__in=ids):
        assert (row.state, row.attempt, row.attempted_by, row.errors) == (
            "completed",
            1,
            [worker_id],
            [],
        ), row.id
    assert Execution.objects.filter(job_id__in=ids).count() == len(ids)


def test_three_workers_without_the_handler_never_starve_the_one_with_it(start_worker):
    old = [
        start_worker("--queue", "acc=4", "--worker-id", f"old-{n}", env=WITHOUT_ROLLING)
        for n in range(3)
    ]
    wait_until(lambda: listening(3), what="the old workers")
    new = start_worker("--queue", "acc=4", "--worker-id", "new")
    wait_until(lambda: listening(4) and registered("new", "old-0"), what="the new worker")

    began = time.monotonic()
    ids = awa_django.enqueue_many([AccRolling(n) for n in range(50)])
    wait_until(
        lambda: Job.objects.filter(id__in=ids, state="completed").count() == 50,
        timeout=30,
        what="the new worker to run all 50",
    )
    elapsed = time.monotonic() - began
    print(f"50 jobs of a new kind beside 3 workers without it: {elapsed:.2f}s")
    assert elapsed < 10, elapsed
    assert_run_once_by(ids, "new")
    assert not Job.objects.filter(state="failed").exists()
    for worker in [*old, new]:
        assert worker.stop() == 0


def test_a_role_holder_without_the_handler_leaves_the_hint_to_a_worker_that_has_it(
    start_worker,
):
    """The worker without the handler starts first and takes the queue's waker role; the
    one with it polls only every 30 s as a standby, so only an enqueue's hint can reach it
    in time."""
    old = start_worker("--queue", "acc=4", "--worker-id", "old", env=WITHOUT_ROLLING)
    wait_until(lambda: role_holders() == 1, what="the old worker to take the role")
    new = start_worker("--queue", "acc=4", "--worker-id", "new", "--standby-poll-interval", "30")
    wait_until(lambda: listening(2) and registered("new", "old"), what="the new worker")

    ids = []
    for n in range(3):
        began = time.monotonic()
        job = awa_django.enqueue(AccRolling(n))
        ids.append(job.id)
        wait_until(
            lambda: Job.objects.get(id=job.id).state == "completed",  # noqa: B023
            timeout=30,
            what=f"job {n} to run",
        )
        waited = time.monotonic() - began
        print(f"job {n}: completed {waited:.3f}s after its enqueue")
        assert waited < 2, waited
    assert_run_once_by(ids, "new")
    assert old.stop() == 0 and new.stop() == 0
