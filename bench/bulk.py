"""`bulk_retry`: `Client.retry_failed` over N failed jobs (default 1,000,000) of one queue
while a worker drains another, and that worker's completion rate during the operation
against windows just before and just after it (decision 018: target >= 80 %).
It runs with the Client's defaults (chunks busy at most a quarter of the time);
`bulk_retry_unpaced` with `busy_fraction=1.0` (no pause between chunks), and
`bulk_retry_paced` with `max_per_second=--bulk-rate` (default 2,000 jobs/s) as well.

The failed rows are written with one `INSERT ... SELECT generate_series`; the drained queue
is kept above a backlog by `enqueue_many` top-ups in every phase alike, so the three rates
differ only by the bulk operation running or not.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import connection, transaction

import awa_django
from awa_django.bulk import BulkProgress
from awa_django.client.bulk import DEFAULT_BUSY_FRACTION

from . import database as db
from .benchapp.jobs import BenchAsync
from .worker import WorkerProcess

FAILED_QUEUE = "bulk-failed"
BACKLOG = 20_000  # bench jobs kept available, topped up in batches of this size
WINDOW = 20.0  # seconds of the before and after windows
SAMPLE = 1.0
CONTROL_SECONDS = 170.0  # seconds between samples of the completed count
CHUNK = 2000

FILL_FAILED = """
INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts, run_at,
                          created_at, attempted_at, finalized_at, run_lease, errors, metadata,
                          tags, attempted_by)
SELECT 'bench_async', %(queue)s, jsonb_build_object('n', g), 'failed', 2, 25, 25,
       now(), now(), now(), now(), 25,
       jsonb_build_array(jsonb_build_object('error', 'ValueError: boom', 'attempt', 25,
                                            'at', now(), 'terminal', true)),
       '{}', '{}', '{}'
FROM generate_series(1, %(rows)s) AS g
"""


def bulk_retry(options: Any) -> dict[str, Any]:
    return _bulk_retry(options, None, DEFAULT_BUSY_FRACTION)


def bulk_control(options: Any) -> dict[str, Any]:
    """bulk_retry with the retry replaced by a sleep of CONTROL_SECONDS (about the default
    retry's duration here): the drain's own drift over the same phase, on the same table
    (it slows as completed rows pile up), to read `bulk_retry`'s "during" against."""
    return _bulk_retry(options, None, DEFAULT_BUSY_FRACTION, control=True)


def bulk_retry_unpaced(options: Any) -> dict[str, Any]:
    return _bulk_retry(options, None, 1.0)


def bulk_retry_paced(options: Any) -> dict[str, Any]:
    return _bulk_retry(options, options.bulk_rate, DEFAULT_BUSY_FRACTION)


def _bulk_retry(
    options: Any, max_per_second: float | None, busy_fraction: float, control: bool = False
) -> dict[str, Any]:
    db.reset()
    with connection.cursor() as cursor:
        cursor.execute(FILL_FAILED, {"queue": FAILED_QUEUE, "rows": options.bulk_jobs})
    feeder = Feeder()
    feeder.top_up()
    db.analyze()
    with WorkerProcess() as worker:
        db.wait_until(lambda: feeder.completed() > 0, 120.0, 0.05, "the first completion")
        before = feeder.rate(WINDOW, worker)
        outcome: dict[str, Any] = {}
        thread = (
            threading.Thread(target=time.sleep, args=(CONTROL_SECONDS,))
            if control
            else threading.Thread(target=_retry_all, args=(outcome, max_per_second, busy_fraction))
        )
        began = time.perf_counter()
        thread.start()
        during = feeder.rate(None, worker, while_alive=thread)
        took = time.perf_counter() - began
        after = feeder.rate(WINDOW, worker)
    progress: BulkProgress | None = outcome.get("progress")
    if not control and (progress is None or progress.done != options.bulk_jobs):
        done = progress.done if progress else 0
        raise RuntimeError(f"retried {done} of {options.bulk_jobs} failed jobs")
    baseline = (before + after) / 2
    return {
        "jobs": options.bulk_jobs,
        "chunk_size": CHUNK,
        "max_per_second": max_per_second,
        "busy_fraction": busy_fraction,
        "control": control,
        "elapsed_s": round(took, 2),
        "jobs_per_s": round(options.bulk_jobs / took, 1),
        "drain_before_per_s": round(before, 1),
        "drain_during_per_s": round(during, 1),
        "drain_after_per_s": round(after, 1),
        "drain_during_vs_outside": round(during / baseline, 3) if baseline else None,
    }


def _retry_all(outcome: dict[str, Any], max_per_second: float | None, busy_fraction: float) -> None:
    try:
        outcome["progress"] = awa_django.Client().retry_failed(
            queue=FAILED_QUEUE,
            chunk_size=CHUNK,
            max_per_second=max_per_second,
            busy_fraction=busy_fraction,
        )
    finally:
        connection.close()  # this thread's own connection


class Feeder:
    """Keeps the bench queue above BACKLOG available jobs and samples completions."""

    def __init__(self) -> None:
        self.enqueued = 0
        self.n = 0

    def completed(self) -> int:
        """Enqueued minus still pending. Counting the pending rows reads a range of the
        (queue, state) index that stays near BACKLOG; counting the completed ones read a
        range growing by thousands a second, a load on the database being measured that
        grew through a run (a 10-minute paced run's "after" window fell to a quarter)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM awa_jobs_hot"
                " WHERE queue = 'bench' AND state IN ('available', 'running')"
            )
            return self.enqueued - int(cursor.fetchone()[0])

    def top_up(self, completed: int = 0) -> None:
        if self.enqueued - completed < BACKLOG:
            with transaction.atomic():
                awa_django.enqueue_many([BenchAsync(n=self.n + i) for i in range(BACKLOG)])
            self.n += BACKLOG
            self.enqueued += BACKLOG

    def rate(
        self,
        seconds: float | None,
        worker: WorkerProcess,
        while_alive: threading.Thread | None = None,
    ) -> float:
        """Completions per second over `seconds`, or while `while_alive` runs."""
        began, first = time.perf_counter(), self.completed()
        ends = began + seconds if seconds is not None else float("inf")
        while time.perf_counter() < ends and (while_alive is None or while_alive.is_alive()):
            if while_alive is None:
                time.sleep(SAMPLE)
            else:
                while_alive.join(SAMPLE)
            worker.check_alive()
            self.top_up(self.completed())
        return (self.completed() - first) / (time.perf_counter() - began)
