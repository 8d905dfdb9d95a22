"""Statements of the observability leader services: the per-minute queue rollups
(`awa_queue_rollups`, decision 021) and the live queue depth and lag the metrics publish."""

from __future__ import annotations

from dataclasses import dataclass

from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement

# Params: none. Index: awa_jobs_dispatch_idx (queue, priority, run_at, id) WHERE
# state = 'available' — an index-only scan (queue and run_at are in the index), so the
# cost is the number of available jobs, never the table. The state is a literal so the
# partial index always matches. depth = available jobs, lag = age of the oldest due one.
QUEUE_DEPTH_LAG = Statement(
    "queue_depth_lag",
    """
SELECT queue, count(*)::int, extract(epoch FROM now() - min(run_at))::float8
FROM awa_jobs_hot
WHERE state = 'available'
GROUP BY queue
""",
)


@dataclass(frozen=True, slots=True)
class QueueFigure:
    """One queue's live depth (available jobs) and lag (seconds the oldest has waited)."""

    queue: str
    depth: int
    lag_seconds: float


def queue_depth_lag() -> Query[list[QueueFigure]]:
    """Depth and lag of every queue with available jobs (a queue absent has 0 and 0)."""
    return Query(QUEUE_DEPTH_LAG, {}, _figures)


def _figures(rows: query.Rows, count: int) -> list[QueueFigure]:
    return [QueueFigure(queue, depth, max(lag, 0.0)) for queue, depth, lag in rows]


# Params: none. Index: awa_jobs_state_id_part_idx (state, id) INCLUDE (queue), partial on
# state NOT IN ('available', 'completed'), which `state = 'waiting_parents'` implies — an
# index-only scan of that state's range, so the cost is the number of children waiting on
# their parents (docs/workflows.md), never the table. The state is a literal so the
# planner can prove the partial predicate.
QUEUE_WAITING_PARENTS = Statement(
    "queue_waiting_parents",
    """
SELECT queue, count(*)::int FROM awa_jobs_hot WHERE state = 'waiting_parents' GROUP BY queue
""",
)


def queue_waiting_parents() -> Query[dict[str, int]]:
    """{queue: jobs waiting on their parents} for every queue that has any (absent: 0)."""
    return Query(QUEUE_WAITING_PARENTS, {}, _depths)


# Params: none. Index: awa_dead_letters_queue_idx (queue, dead_lettered_at) — an index-only
# scan grouped on its leading column, so the table's wide rows are never read; its cost
# is the number of dead letters kept (DEAD_LETTER_RETENTION prunes them).
DEAD_LETTER_DEPTH = Statement(
    "dead_letter_depth",
    """
SELECT queue, count(*)::int FROM awa_dead_letters GROUP BY queue
""",
)


def dead_letter_depth() -> Query[dict[str, int]]:
    """{queue: dead letters} for every queue that has any (a queue absent has 0)."""
    return Query(DEAD_LETTER_DEPTH, {}, _depths)


def _depths(rows: query.Rows, count: int) -> dict[str, int]:
    return {queue: depth for queue, depth in rows}


# Params: minutes (how many complete minutes before the current one to roll up; the
# leader passes a few so a minute a leader change skipped is filled in later).
# Index: awa_jobs_finalized_idx (finalized_at) WHERE state IN (terminal states) for the
# minutes' jobs — a range of at most `minutes` minutes of finalized rows; the live
# depth/lag part as in QUEUE_DEPTH_LAG. The states are literals so both partial indexes
# match. Idempotent: a minute rolled up twice gets the same counts (ON CONFLICT updates
# them); depth and lag are snapshots, kept from the first time a minute was written.
# retried counts the attempts before the last of the minute's jobs (each ended in a retry
# or a rescue; a snooze refunds its attempt), decision 021.
# A job of a dead-letter queue that failed for good leaves awa_jobs_hot for
# awa_dead_letters: it counts as failed in the minute it was dead-lettered (index
# awa_dead_letters_at_idx, the same few minutes). An operator's manual move of a job that
# had already failed is no new failure and is left out.
QUEUE_ROLLUP_MINUTES = Statement(
    "queue_rollup_minutes",
    """
WITH bounds AS (
    SELECT date_trunc('minute', now()) AS upper,
           date_trunc('minute', now()) - make_interval(mins => %(minutes)s) AS lower
), dead AS (
    SELECT d.queue, date_trunc('minute', d.dead_lettered_at) AS minute,
           count(*) AS failed, sum(greatest(d.attempt - 1, 0)) AS retried
    FROM awa_dead_letters d, bounds b
    WHERE d.dead_lettered_at >= b.lower AND d.dead_lettered_at < b.upper
      AND d.reason <> 'manual'
    GROUP BY 1, 2
), finished AS (
    SELECT j.queue, date_trunc('minute', j.finalized_at) AS minute,
           count(*) FILTER (WHERE j.state = 'completed') AS completed,
           count(*) FILTER (WHERE j.state = 'failed') AS failed,
           count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled,
           coalesce(sum(j.retries), 0) AS retried,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY j.wait) AS wait_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY j.wait) AS wait_p95,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY j.run) AS run_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY j.run) AS run_p95
    FROM (
        SELECT f.queue, f.state, f.finalized_at,
               extract(epoch FROM f.attempted_at - f.created_at) AS wait,
               extract(epoch FROM f.finalized_at - f.attempted_at) AS run,
               greatest(f.attempt - 1, 0) AS retries
        FROM awa_jobs_hot f, bounds b
        WHERE f.state IN ('completed', 'failed', 'cancelled')
          AND f.finalized_at >= b.lower AND f.finalized_at < b.upper
    ) j
    GROUP BY 1, 2
), done AS (
    SELECT coalesce(f.queue, d.queue) AS queue, coalesce(f.minute, d.minute) AS minute,
           coalesce(f.completed, 0) AS completed,
           coalesce(f.failed, 0) + coalesce(d.failed, 0) AS failed,
           coalesce(f.cancelled, 0) AS cancelled,
           coalesce(f.retried, 0) + coalesce(d.retried, 0) AS retried,
           f.wait_p50, f.wait_p95, f.run_p50, f.run_p95
    FROM finished f FULL JOIN dead d ON d.queue = f.queue AND d.minute = f.minute
), live AS (
    SELECT queue, count(*) AS depth, extract(epoch FROM now() - min(run_at)) AS lag
    FROM awa_jobs_hot WHERE state = 'available' GROUP BY queue
), latest AS (
    SELECT upper - interval '1 minute' AS minute FROM bounds
), latest_done AS (
    SELECT d.* FROM done d, latest WHERE d.minute = latest.minute
), merged AS (
    SELECT d.queue, d.minute, d.completed, d.failed, d.cancelled, d.retried,
           d.wait_p50, d.wait_p95, d.run_p50, d.run_p95, NULL::bigint AS depth,
           NULL::float8 AS lag
    FROM done d, latest WHERE d.minute <> latest.minute
    UNION ALL
    SELECT coalesce(d.queue, l.queue), (SELECT minute FROM latest),
           coalesce(d.completed, 0), coalesce(d.failed, 0), coalesce(d.cancelled, 0),
           coalesce(d.retried, 0), d.wait_p50, d.wait_p95, d.run_p50, d.run_p95,
           coalesce(l.depth, 0), greatest(coalesce(l.lag, 0), 0)::float8
    FROM latest_done d FULL JOIN live l ON l.queue = d.queue
)
INSERT INTO awa_queue_rollups (queue, minute, completed, failed, cancelled, retried,
                               wait_p50, wait_p95, run_p50, run_p95, depth, lag_seconds)
SELECT queue, minute, completed, failed, cancelled, retried,
       wait_p50, wait_p95, run_p50, run_p95, depth, lag
FROM merged
ON CONFLICT (queue, minute) DO UPDATE
SET completed = EXCLUDED.completed, failed = EXCLUDED.failed,
    cancelled = EXCLUDED.cancelled, retried = EXCLUDED.retried,
    wait_p50 = EXCLUDED.wait_p50, wait_p95 = EXCLUDED.wait_p95,
    run_p50 = EXCLUDED.run_p50, run_p95 = EXCLUDED.run_p95,
    depth = coalesce(awa_queue_rollups.depth, EXCLUDED.depth),
    lag_seconds = coalesce(awa_queue_rollups.lag_seconds, EXCLUDED.lag_seconds)
""",
    returns_rows=False,
)


def queue_rollup_minutes(*, minutes: int) -> Query[int]:
    """Roll up the `minutes` complete minutes before this one; how many rows it wrote."""
    return Query(QUEUE_ROLLUP_MINUTES, {"minutes": minutes}, query.rowcount)


# Params: retention_seconds. Index: awa_rollups_minute_idx. At most a day of minutes per
# queue, so one statement prunes everything expired.
QUEUE_ROLLUP_PRUNE = Statement(
    "queue_rollup_prune",
    """
DELETE FROM awa_queue_rollups
WHERE minute < now() - make_interval(secs => %(retention_seconds)s)
""",
    returns_rows=False,
)


def queue_rollup_prune(*, retention_seconds: float) -> Query[int]:
    """Delete rollups older than `retention_seconds`; how many it deleted."""
    return Query(QUEUE_ROLLUP_PRUNE, {"retention_seconds": retention_seconds}, query.rowcount)
