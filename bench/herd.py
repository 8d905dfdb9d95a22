"""`herd`: issue 13's idle-worker herd. HERD_PROCESSES worker processes (one supervisor,
`--processes`) wait idle on the bench queue; 1,000 probes (`--pickup-jobs`) are enqueued
one per millisecond (`--pickup-interval-ms`), each in its own autocommit transaction.

Claim statements are counted by the workers themselves: each child serves its metrics on
METRICS_PORT + its index, and `awa_dispatch_claim_batch_size_count` is the number of claim
statements it ran (the dispatch index's scan count misses claims the planner serves from
another index when the queue is empty). The workers also poll while idle, so the claims of
an idle window of the same length measured just before are subtracted: what is left is
what the workload's wake-ups cost. The CPU seconds of the worker processes and of their
PostgreSQL backends are counted the same way (idle rate subtracted): on a machine shared
with other work, wall-clock latency swings with the load, CPU seconds much less. Pickup
latency is enqueue commit → handler start, as in `pickup_async`.
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.db import connection

from . import database as db
from . import procfs
from .benchapp.jobs import PickupAsync
from .stats import latency_ms
from .worker import WorkerProcess

HERD_PROCESSES = 16
CONCURRENCY = 10  # per process
METRICS_PORT = 19464  # child i serves http://127.0.0.1:(METRICS_PORT + i)/metrics
SETTLE = 0.5  # seconds after the workload: the last completions' claims are counted
IDLE_WINDOW = 3.0  # seconds of idle polling measured before the workload
CLAIMS = re.compile(r'^awa_dispatch_claim_batch_size_count\{queue="bench"\} (\S+)$', re.M)


def herd(options: Any) -> dict[str, Any]:
    from .scenarios import POLL_INTERVAL, _all_completed, _enqueue_paced, _warm_up

    db.reset()
    extra_args = ["--metrics-port", str(METRICS_PORT), *os.environ.get("HERD_EXTRA", "").split()]
    with WorkerProcess(
        processes=HERD_PROCESSES, concurrency=CONCURRENCY, extra_args=extra_args
    ) as worker:
        _warm_up(worker, PickupAsync)
        db.wait_until(_all_serving, 120.0, 0.2, "every worker's metrics endpoint")
        idle = _claims_over(worker.pid, lambda: time.sleep(IDLE_WINDOW))
        count, interval = options.pickup_jobs, options.pickup_interval
        committed: dict[int, float] = {}

        def workload() -> None:
            committed.update(_enqueue_paced(PickupAsync, count, interval))
            ids = list(committed)
            db.wait_until(
                lambda: _all_completed(worker, ids), 120.0, POLL_INTERVAL, f"{count} probes"
            )

        busy = _claims_over(worker.pid, workload)
    started = db.handler_start_times(list(committed))
    if len(started) != count:
        raise RuntimeError(f"{count - len(started)} probes have no handler start time (result)")
    idle_rate = idle.claims / idle.seconds
    claims = busy.claims - idle_rate * busy.seconds
    return {
        "jobs": count,
        "processes": HERD_PROCESSES,
        "concurrency": CONCURRENCY,
        "interval_ms": round(interval * 1000, 1),
        "jobs_per_s": None,
        "idle_claims_per_s": round(idle_rate, 1),
        "window_s": round(busy.seconds, 2),
        "claims_in_window": busy.claims,
        "claims_for_the_jobs": round(claims),
        "claims_per_job": round(claims / count, 2),
        "idle_worker_cpu_s_per_s": round(idle.worker_cpu / idle.seconds, 3),
        "idle_backends_cpu_s_per_s": round(idle.backends_cpu / idle.seconds, 3),
        "worker_cpu_s": round(busy.worker_cpu - idle.worker_cpu / idle.seconds * busy.seconds, 2),
        "backends_cpu_s": round(
            busy.backends_cpu - idle.backends_cpu / idle.seconds * busy.seconds, 2
        ),
        "latency": "enqueue commit -> handler start",
        **latency_ms([started[i] - committed[i] for i in committed]),
    }


@dataclass(frozen=True)
class Window:
    claims: int
    seconds: float
    worker_cpu: float  # CPU seconds of the worker processes
    backends_cpu: float  # and of their PostgreSQL backends


def _claims_over(root: int, action: Any) -> Window:
    """Claim statements and CPU seconds of all workers during `action()` (plus SETTLE
    after it), and the seconds that covered."""
    claims, cpu, backends = _claims(), procfs.worker_cpu(root), _backend_cpu()
    began = time.monotonic()
    action()
    time.sleep(SETTLE)
    after = _backend_cpu()
    return Window(
        _claims() - claims,
        time.monotonic() - began,
        procfs.worker_cpu(root) - cpu,
        sum(after[pid] - backends[pid] for pid in after.keys() & backends.keys()),
    )


def _backend_cpu() -> dict[int, float]:
    """CPU seconds so far of each backend serving the workers: of this database only (the
    server may serve other workers), by pid (a backend that comes or goes in the window
    would count its whole life)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name LIKE 'awa-worker%%'"
        )
        return {pid: procfs.cpu_seconds([pid]) for (pid,) in cursor.fetchall()}


def _all_serving() -> bool:
    try:
        _claims()
    except OSError:
        return False
    return True


def _claims() -> int:
    total = 0.0
    for child in range(HERD_PROCESSES):
        url = f"http://127.0.0.1:{METRICS_PORT + child}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            total += sum(float(v) for v in CLAIMS.findall(response.read().decode()))
    return round(total)
