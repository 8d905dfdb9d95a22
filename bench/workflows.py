"""`fan_in` and `chains`: drains of jobs that wait for other jobs (issue 29, docs/workflows.md).

`fan_in`: `--flows` (10,000) parents and one child enqueued `after=` all of them; the child
becomes available in the transaction of the last parent's completion. `chains`: `--flows`
chains of three (`chain(a, b, c)`), each link made available by its parent's completion.
Everything is enqueued before the worker starts (one transaction), then one worker of
`--concurrency` drains it, as `drain_async` does: its jobs/s sit beside the plain drain's
in the same sitting (`--scenario workflows`), and `worker_cpu_s_per_job` says what the
dependency bookkeeping costs the worker. The run fails unless every job completed and
every child started after its last parent finished.
"""

from __future__ import annotations

import time
from statistics import median
from typing import Any

from django.db import connection, transaction

import awa_django

from . import database as db
from . import procfs
from .benchapp.jobs import BenchAsync
from .stats import latency_ms
from .worker import WorkerProcess

POLL_INTERVAL = 0.02
CHAIN_LENGTH = 3
ENQUEUE_WINDOW = 100  # chains at each end of the enqueue whose median is reported


def fan_in(options: Any) -> dict[str, Any]:
    """`options.flows` parents -> 1 child."""
    db.reset()
    parents = options.flows
    with transaction.atomic():
        ids = awa_django.enqueue_many([BenchAsync(n=i) for i in range(parents)])
        awa_django.enqueue(BenchAsync(n=-1), after=ids)
    return {**_drain_flows(parents + 1, options.concurrency), "parents": parents}


def chains(options: Any) -> dict[str, Any]:
    """`options.flows` chains of CHAIN_LENGTH."""
    db.reset()
    enqueued = _enqueue_chains(options.flows)
    total = options.flows * CHAIN_LENGTH
    return {**_drain_flows(total, options.concurrency), "chains": options.flows, **enqueued}


def _enqueue_chains(flows: int) -> dict[str, Any]:
    """Enqueue `flows` chains in one transaction on the freshly emptied tables (whose
    statistics say nothing yet), timing each `chain()` call: the median of the first and
    of the last ENQUEUE_WINDOW calls says whether a chain's cost grows with the chains
    enqueued before it in the transaction (issue 29)."""
    per_chain: list[float] = []
    started = time.perf_counter()
    with transaction.atomic():
        for i in range(flows):
            links = [BenchAsync(n=CHAIN_LENGTH * i + k) for k in range(CHAIN_LENGTH)]
            before = time.perf_counter()
            awa_django.chain(*links)
            per_chain.append(time.perf_counter() - before)
    enqueue_s = time.perf_counter() - started  # incl. the commit
    return {
        "enqueue_s": round(enqueue_s, 3),
        "enqueue_ms_first_chains": round(1000 * median(per_chain[:ENQUEUE_WINDOW]), 3),
        "enqueue_ms_last_chains": round(1000 * median(per_chain[-ENQUEUE_WINDOW:]), 3),
    }


def _drain_flows(total: int, concurrency: int) -> dict[str, Any]:
    db.analyze()
    with WorkerProcess(concurrency=concurrency) as worker:
        drained_at = db.wait_until(
            lambda: _all_completed(worker, total),
            max(120.0, total / 50),
            POLL_INTERVAL,
            f"{total} completions",
        )
        worker_cpu, backend_cpu = procfs.worker_cpu(worker.pid), procfs.backend_cpu()
    if (counts := db.state_counts()) != {"completed": total}:
        raise RuntimeError(f"after the drain the jobs are {counts}, expected {total} completed")
    if early := children_started_early():
        raise RuntimeError(f"{early} children started before their last parent finished")
    first, last = db.completion_times()
    elapsed = drained_at - worker.started_at
    return {
        "jobs": total,
        "processes": 1,
        "concurrency": concurrency,
        "handlers": "async",
        "jobs_per_s": round(total / elapsed, 1),
        "jobs_per_s_excl_startup": round(total / max(last - first, 1e-9), 1),
        "startup_s": round(first - worker.started_at, 3),
        "elapsed_s": round(elapsed, 3),
        "worker_cpu_s": round(worker_cpu, 2),
        "worker_cpu_ms_per_job": round(1000 * worker_cpu / total, 3),
        "backends_cpu_s": None if backend_cpu is None else round(backend_cpu, 2),
        "stop_s": None if worker.stop_seconds is None else round(worker.stop_seconds, 3),
        "latency": "claim commit -> completion commit",
        **latency_ms(db.claim_to_completion_seconds()),
    }


def _all_completed(worker: WorkerProcess, total: int) -> bool:
    worker.check_alive()
    # Children wait in their own state, so the drain's probe (any_pending) would not see
    # them: count completions instead (the finalized index, once per poll).
    return db.completed_count() >= total


def children_started_early() -> int:
    """Children whose attempt started before one of their parents was finalized."""
    with connection.cursor() as cursor:
        cursor.execute(CHILDREN_STARTED_EARLY)
        return int(cursor.fetchone()[0])


CHILDREN_STARTED_EARLY = """
SELECT count(DISTINCT child.id)
FROM awa_job_dependencies d
JOIN awa_jobs_hot child ON child.id = d.child_id
JOIN awa_jobs_hot parent ON parent.id = d.parent_id
WHERE child.attempted_at < parent.finalized_at
"""
