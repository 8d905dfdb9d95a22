"""`herd`: issue 13's idle-worker herd. HERD_PROCESSES worker processes (one supervisor,
`--processes`) wait idle on the bench queue; 1,000 probes (`--pickup-jobs`) are enqueued
one per millisecond (`--pickup-interval-ms`), each in its own autocommit transaction.

Claim statements are the dispatch index's scans (`pg_stat_user_indexes`, which backends
flush within about a second of going idle). The workers also poll while idle, so the
scans of an idle window of the same length measured just before are subtracted: what is
left is what the workload's wake-ups cost. Pickup latency is enqueue commit → handler
start, as in `pickup_async`.
"""

from __future__ import annotations

import time
from typing import Any

from . import database as db
from .benchapp.jobs import PickupAsync
from .stats import latency_ms
from .worker import WorkerProcess

HERD_PROCESSES = 16
CONCURRENCY = 10  # per process
STATS_SETTLE = 2.0  # seconds for every backend to flush its index statistics
IDLE_WINDOW = 3.0  # seconds of idle polling measured before the workload


def herd(options: Any) -> dict[str, Any]:
    from .scenarios import POLL_INTERVAL, _all_completed, _enqueue_paced, _warm_up

    db.reset()
    with WorkerProcess(processes=HERD_PROCESSES, concurrency=CONCURRENCY) as worker:
        _warm_up(worker, PickupAsync)
        time.sleep(STATS_SETTLE)
        idle_scans, idle_seconds = _scans_over(lambda: time.sleep(IDLE_WINDOW))
        count, interval = options.pickup_jobs, options.pickup_interval
        committed: dict[int, float] = {}

        def workload() -> None:
            committed.update(_enqueue_paced(PickupAsync, count, interval))
            ids = list(committed)
            db.wait_until(
                lambda: _all_completed(worker, ids), 120.0, POLL_INTERVAL, f"{count} probes"
            )

        scans, seconds = _scans_over(workload)
    started = db.handler_start_times(list(committed))
    if len(started) != count:
        raise RuntimeError(f"{count - len(started)} probes have no handler start time (result)")
    idle_rate = idle_scans / idle_seconds
    claims = scans - idle_rate * seconds
    return {
        "jobs": count,
        "processes": HERD_PROCESSES,
        "concurrency": CONCURRENCY,
        "interval_ms": round(interval * 1000, 1),
        "jobs_per_s": None,
        "idle_claims_per_s": round(idle_rate, 1),
        "window_s": round(seconds, 2),
        "claims_in_window": scans,
        "claims_for_the_jobs": round(claims),
        "claims_per_job": round(claims / count, 2),
        "latency": "enqueue commit -> handler start",
        **latency_ms([started[i] - committed[i] for i in committed]),
    }


def _scans_over(action: Any) -> tuple[int, float]:
    """Dispatch-index scans during `action()` (plus the settle time after it), and the
    seconds that covered."""
    before, _ = db.dispatch_index_reads()
    began = time.monotonic()
    action()
    time.sleep(STATS_SETTLE)
    after, _ = db.dispatch_index_reads()
    return after - before, time.monotonic() - began
