"""`soak` (issue 13, target 4): `--soak-minutes` (30) of `--soak-rate` (1,000) jobs a second
offered to one worker, 95 % succeeding, 4 % failing once and succeeding on the retry, 1 %
failing for good (`BenchSoak`). Finished jobs are kept RETENTION_S and pruned every 10 s
(`AWA_BENCH_RETENTION`), so the table can reach a steady size within the run.

A producer thread enqueues `enqueue_many` batches of 10 every 10 ms, each in its own
transaction. At the end of every minute the scenario reads, from the rows still there:

- enqueue -> completion (`created_at` -> `finalized_at`) p50/p99 of the jobs that succeeded
  at their first attempt and finished in the minute's last WINDOW_S seconds (a retried job
  waits out its ~2 s backoff by design; their p50 is reported apart);
- the heap and index sizes of `awa_jobs_hot`, the lease table's size, its dead rows, the
  jobs not yet finished (`pending`), the WAL position and the database's commit count.

Over the run after the first minute: jobs finished per second (enqueued minus the growth
of `pending`), and WAL bytes and commits per finished job.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import connection, connections, transaction

import awa_django

from . import database as db
from .benchapp.jobs import BenchSoak
from .worker import WorkerProcess

BATCH = 10  # jobs per enqueue transaction
MINUTE = 60.0
WINDOW_S = 50.0
RETENTION_S = 120.0


def soak(options: Any) -> dict[str, Any]:
    db.reset()
    minutes = int(options.soak_minutes)
    rate = float(options.soak_rate)
    stop = threading.Event()
    enqueued = [0]
    producer = threading.Thread(target=_produce, args=(rate, stop, enqueued), daemon=True)
    samples: list[dict[str, Any]] = []
    env = {"AWA_BENCH_RETENTION": str(RETENTION_S)}
    with WorkerProcess(extra_env=env) as worker:
        time.sleep(2.0)
        producer.start()
        began = time.monotonic()
        for minute in range(1, minutes + 1):
            while time.monotonic() < began + minute * MINUTE:
                worker.check_alive()
                time.sleep(0.5)
            samples.append({"minute": minute, "enqueued": enqueued[0], **_sample()})
            db.log(f"soak {_brief(samples[-1])}")
        stop.set()
        producer.join()
    first, last = samples[0], samples[-1]
    finished = (last["enqueued"] - first["enqueued"]) - (last["pending"] - first["pending"])
    seconds = last["at"] - first["at"]
    return {
        "minutes": minutes,
        "offered_per_s": rate,
        "enqueued": enqueued[0],
        "finished_per_s": round(finished / seconds, 1) if seconds else None,
        "wal_bytes_per_job": round((last["wal_lsn"] - first["wal_lsn"]) / finished),
        "commits_per_job": round((last["commits"] - first["commits"]) / finished, 2),
        "worst_minute_p99_ms": max(s["p99_ms"] or 0.0 for s in samples),
        "latency": "enqueue commit (created_at) -> completion (finalized_at), first attempts",
        "minutes_detail": [
            {k: v for k, v in s.items() if k not in ("at", "wal_lsn", "commits", "enqueued")}
            for s in samples
        ],
    }


def _produce(rate: float, stop: threading.Event, enqueued: list[int]) -> None:
    """Enqueue BATCH jobs every BATCH / rate seconds on a fixed schedule."""
    interval = BATCH / rate
    due = time.monotonic()
    try:
        while not stop.is_set():
            n = enqueued[0]
            with transaction.atomic():
                awa_django.enqueue_many([BenchSoak(n=n + i) for i in range(BATCH)])
            enqueued[0] = n + BATCH
            due += interval
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    finally:
        connections.close_all()


SAMPLE = """
SELECT extract(epoch FROM now()),
       pg_relation_size('awa_jobs_hot'), pg_indexes_size('awa_jobs_hot'),
       pg_total_relation_size('awa_active_leases'),
       pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'),
       (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'awa_jobs_hot'),
       (SELECT count(*) FROM awa_jobs_hot
        WHERE state IN ('available', 'running', 'scheduled', 'retryable')),
       (SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY
                   extract(epoch FROM finalized_at - created_at))
        FROM awa_jobs_hot WHERE state = 'completed' AND attempt = 1
          AND finalized_at > now() - make_interval(secs => %(window)s)),
       (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY
                   extract(epoch FROM finalized_at - created_at))
        FROM awa_jobs_hot WHERE state = 'completed' AND attempt = 2
          AND finalized_at > now() - make_interval(secs => %(window)s))
"""


def _sample() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(SAMPLE, {"window": WINDOW_S})
        at, jobs, indexes, leases, lsn, commits, dead, pending, first, retried = cursor.fetchone()
    mb = 1024 * 1024
    p50, p99 = first or (None, None)
    return {
        "at": float(at),
        "p50_ms": None if p50 is None else round(p50 * 1000, 1),
        "p99_ms": None if p99 is None else round(p99 * 1000, 1),
        "retried_p50_ms": None if retried is None else round(retried * 1000),
        "pending": int(pending),
        "jobs_mb": round(jobs / mb, 1),
        "jobs_indexes_mb": round(indexes / mb, 1),
        "leases_mb": round(leases / mb, 2),
        "dead_rows": int(dead or 0),
        "wal_lsn": int(lsn),
        "commits": int(commits),
    }


def _brief(sample: dict[str, Any]) -> str:
    return (
        f"minute {sample['minute']}: p99 {sample['p99_ms']} ms, pending {sample['pending']},"
        f" heap {sample['jobs_mb']} MB, indexes {sample['jobs_indexes_mb']} MB,"
        f" dead {sample['dead_rows']}"
    )
