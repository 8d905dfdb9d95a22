"""Issue 26, item 10, with real worker processes: no lease row outlives its attempt by more
than a moment (decision 033), and a worker never shows more live leases than its slots
plus one completion batch, while four workers drain a queue with heartbeats every 0.2 s."""

from __future__ import annotations

import threading
import time
from collections import Counter

import psycopg
import pytest
from django.db import connection

import awa_django
from awa_django.storage.models import ActiveLease, Job
from awa_django.worker.database import connection_kwargs
from testproject.testjobs.jobs import AccNoop
from tests.waiting import wait_until

from .test_worker_process import listening

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WORKERS, SLOTS, JOBS = 4, 8, 3000


class LeaseSampler(threading.Thread):
    """Counts the lease rows of each worker, and those whose job no longer runs under
    them (late rows), every few milliseconds on a connection of its own."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most_per_worker = 0
        self.most_late = 0
        self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        kwargs = connection_kwargs("default", "awa-test-lease-sampler")
        with psycopg.connect(**kwargs) as conn:
            while not self.stop.is_set():
                per_worker = Counter(
                    dict(
                        conn.execute(
                            "SELECT worker_id, count(*) FROM awa_active_leases GROUP BY 1"
                        ).fetchall()
                    )
                )
                late = conn.execute(
                    "SELECT count(*) FROM awa_active_leases l WHERE NOT EXISTS (SELECT 1"
                    " FROM awa_jobs_hot j WHERE j.id = l.job_id AND j.run_lease = l.run_lease"
                    " AND j.state IN ('running', 'waiting_external'))"
                ).fetchone()[0]  # type: ignore[index]
                self.most_per_worker = max([self.most_per_worker, *per_worker.values()])
                self.most_late = max(self.most_late, late)
                self.samples += 1
                time.sleep(0.005)


def test_no_lease_outlives_its_attempt_in_a_four_worker_drain(start_worker):
    workers = [
        # The leader's orphan sweep would take stale leases after 30 s: not in this test.
        start_worker("--queue", f"acc={SLOTS}", "--heartbeat-staleness", "30")
        for _ in range(WORKERS)
    ]
    wait_until(lambda: listening(WORKERS), what="the workers")
    sampler = LeaseSampler()
    sampler.start()
    ids = awa_django.enqueue_many([AccNoop(n) for n in range(JOBS)])
    try:
        wait_until(
            lambda: Job.objects.filter(id__in=ids, state="completed").count() == JOBS,
            timeout=120,
            what="the drain",
        )
        drained = time.monotonic()
        wait_until(lambda: not ActiveLease.objects.exists(), timeout=10, what="no lease left")
        lingered = time.monotonic() - drained
    finally:
        sampler.stop.set()
        sampler.join(timeout=5)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM testjobs_execution")
        assert cursor.fetchone()[0] == JOBS
    print(
        f"{sampler.samples} samples: at most {sampler.most_per_worker} leases per worker "
        f"({SLOTS} slots), {sampler.most_late} late rows; the last lease went "
        f"{lingered:.2f}s after the drain"
    )
    assert sampler.samples > 50
    assert sampler.most_per_worker <= 2 * SLOTS  # the slots, plus one completion batch
    # A late row lives until its heartbeat's next sweep (50 ms): never more than one batch
    # of them per worker at once (without decision 033 they piled up until the orphan sweep).
    assert sampler.most_late <= WORKERS * SLOTS
    assert lingered < 1.0
    for worker in workers:
        assert worker.stop() == 0
