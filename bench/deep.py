"""Deep tables (issue 13, target 3): the queue measured with the rows a production table
carries, not on a fresh one.

- `drain_deep`: `drain_async` with 1,000,000 completed and 1,000,000 scheduled (a day
  ahead) rows of another queue in `awa_jobs_hot` (`--deep-rows`); compare with
  `drain_async` run in the same sitting.
- `drain_pruning` / `drain_pruning_control`: `drain_async` while the leader prunes
  `--deep-rows` completed rows past their retention, against the same drain beside as many
  completed rows still inside it (nothing to prune).
- `promote_deep`: `--promote-rows` (10,000,000) scheduled rows a year ahead, then 1,000 jobs
  a second falling due for `--promote-seconds` (60): how late each is claimed
  (`attempted_at` minus its due time) while the promoter works out of the deep table.

The ballast is written by `INSERT ... SELECT generate_series` in chunks of 1,000,000 rows
(with every index in place, as a live table has them), then `VACUUM (ANALYZE)`.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connection
from django.db.models.functions import Now

from awa_django.storage.models import LeaderLease

from . import database as db
from .stats import latency_ms
from .worker import WorkerProcess

CHUNK = 1_000_000
PROMOTE_RATE = 1000  # jobs falling due per second
PROMOTE_LEAD = 10.0  # seconds from the insert of the due stream to its first due time

FILL = """
INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts, run_at,
                          created_at, attempted_at, finalized_at, run_lease, errors, metadata,
                          tags, attempted_by)
SELECT %(kind)s, %(queue)s, jsonb_build_object('n', g), %(state)s, 2,
       CASE WHEN %(state)s = 'completed' THEN 1 ELSE 0 END, 25,
       now() + make_interval(secs => %(run_at_s)s + g * %(step_s)s), now(),
       CASE WHEN %(state)s = 'completed' THEN now() - make_interval(secs => %(age_s)s) END,
       CASE WHEN %(state)s = 'completed' THEN now() - make_interval(secs => %(age_s)s) END,
       CASE WHEN %(state)s = 'completed' THEN 1 ELSE 0 END, '[]',
       jsonb_build_object('due', extract(epoch FROM now()) + %(run_at_s)s + g * %(step_s)s),
       '{}', '{}'
FROM generate_series(%(first)s, %(last)s) AS g
"""


def fill(
    rows: int,
    state: str,
    *,
    queue: str = db.BALLAST,
    kind: str = "deep_ballast",
    age_s: float = 0.0,
    run_at_s: float = 0.0,
    step_s: float = 0.0,
) -> float:
    """Insert `rows` jobs in `state`; returns the seconds it took."""
    began = time.monotonic()
    with connection.cursor() as cursor:
        for first in range(1, rows + 1, CHUNK):
            params = {
                "kind": kind,
                "queue": queue,
                "state": state,
                "age_s": age_s,
                "run_at_s": run_at_s,
                "step_s": step_s,
                "first": first,
                "last": min(first + CHUNK - 1, rows),
            }
            cursor.execute(FILL, params)
            db.log(f"  {state}: {min(first + CHUNK - 1, rows):,} of {rows:,} rows")
    return time.monotonic() - began


def vacuum_analyze() -> None:
    """Statistics for the planner, the visibility map set, and a CHECKPOINT so the writes of
    the fill are not flushed during the measurement."""
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) awa_jobs_hot")
        cursor.execute("CHECKPOINT")


def deep_ballast(rows: int) -> dict[str, Any]:
    """`rows` completed (an hour old, inside the 24 h retention) and `rows` scheduled (a
    day ahead) jobs of the ballast queue."""
    took = fill(rows, "completed", age_s=3600.0)
    took += fill(rows, "scheduled", run_at_s=86400.0)
    vacuum_analyze()
    return {"ballast_completed": rows, "ballast_scheduled": rows, "ballast_fill_s": round(took)}


def prunable_ballast(rows: int, *, prunable: bool) -> dict[str, Any]:
    """`rows` completed jobs of the ballast queue, two days old (past the 24 h retention:
    the leader prunes them as soon as it leads) or an hour old (kept)."""
    took = fill(rows, "completed", age_s=2 * 86400.0 if prunable else 3600.0)
    vacuum_analyze()
    return {"ballast_completed": rows, "prunable": prunable, "ballast_fill_s": round(took)}


def ballast_left() -> int:
    """Ballast rows still in the table (after a drain_pruning run: not yet pruned)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa_jobs_hot WHERE queue = %s", [db.BALLAST])
        return int(cursor.fetchone()[0])


def _leading() -> bool:
    return LeaderLease.objects.filter(expires_at__gt=Now()).exists()


def promote_deep(options: Any) -> dict[str, Any]:
    db.reset()
    took = fill(options.promote_rows, "scheduled", run_at_s=365 * 86400.0)
    vacuum_analyze()
    count = int(PROMOTE_RATE * options.promote_seconds)
    with WorkerProcess() as worker:
        # Up and leading (it seeks leadership a second after it starts, decision 031).
        db.wait_until(_leading, 30.0, 0.1, "the worker's leadership")
        fill(
            count,
            "scheduled",
            queue="bench",
            kind="bench_async",
            run_at_s=PROMOTE_LEAD,
            step_s=1.0 / PROMOTE_RATE,
        )
        db.wait_until(
            lambda: _completed(worker, count),
            PROMOTE_LEAD + options.promote_seconds + 120.0,
            0.5,
            f"{count} due jobs",
        )
    lateness = db.lateness_seconds()
    if len(lateness) != count:
        raise RuntimeError(f"{len(lateness)} of {count} due jobs were claimed")
    return {
        "scheduled_rows": options.promote_rows,
        "fill_s": round(took),
        "due_jobs": count,
        "due_per_s": PROMOTE_RATE,
        "latency": "due time -> claim (attempted_at)",
        **latency_ms(lateness),
        "per_10s_p99_ms": _p99_per_window(db.lateness_by_due(), 10.0),
    }


def _completed(worker: WorkerProcess, count: int) -> bool:
    worker.check_alive()
    return db.state_counts().get("completed", 0) >= count


def _p99_per_window(rows: list[tuple[float, float]], window: float) -> list[float]:
    """p99 lateness (ms) of the jobs due in each `window` seconds, in due order."""
    if not rows:
        return []
    start = rows[0][0]
    buckets: dict[int, list[float]] = {}
    for due, late in rows:
        buckets.setdefault(int((due - start) // window), []).append(late)
    return [latency_ms(buckets[k])["p99_ms"] for k in sorted(buckets)]
