"""The priority aging statement the maintenance leader runs per queue (decision 018)."""

from __future__ import annotations

from awa_django.conf import AGING_TOP_PRIORITY
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement

# The priority a job has earned by waiting: one level per `interval` seconds available
# (run_at is when it became available: enqueue or promotion sets it to now()), counted
# from the priority it was enqueued with, never above AGING_TOP_PRIORITY. Computed from
# the clock, not decremented per pass, so a late or missed pass catches up exactly.
_EARNED = f"""greatest({AGING_TOP_PRIORITY}, coalesce(j.original_priority, j.priority)
    - floor(extract(epoch FROM now() - j.run_at) / %(interval)s::float8)::int)"""

# Params: queue, interval (seconds > 0), limit. Index: awa_jobs_dispatch_idx (queue,
# priority, run_at, id) WHERE state='available', walked one priority level at a time: the
# recursive CTE finds the levels above the top (one index probe each, at most ~100), and
# per level the due rows are the oldest ones (`run_at <= now() - interval`), a tight range
# of the index. A single `priority > top AND run_at <= x` scan would read every fresh row of
# a flooded level to find the few old ones. Rows a claim holds are skipped (SKIP LOCKED):
# aging never waits for, nor blocks, a dispatcher. FOR UPDATE re-checks the WHERE on the
# row's latest version and holds the lock until the UPDATE, so the UPDATE needs no second
# guard. The ids go in as an array (an InitPlan) so the UPDATE finds them by primary key:
# joined to the CTE, the planner took `due`'s LIMIT as its size and hashed the table. A row
# aged at the previous pass (one interval ago) is due again at this one, so the per-level
# ranges hold few rows that are not yet due. First aging stores the enqueued priority in
# original_priority.
JOB_AGE_PRIORITY = Statement(
    "job_age_priority",
    f"""
WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM awa_jobs_hot
     WHERE state = 'available' AND queue = %(queue)s AND priority > {AGING_TOP_PRIORITY}
     ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM awa_jobs_hot j
            WHERE j.state = 'available' AND j.queue = %(queue)s AND j.priority > l.priority
            ORDER BY j.priority LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL
), due AS (
    SELECT d.id FROM levels l CROSS JOIN LATERAL (
        SELECT j.id FROM awa_jobs_hot j
        WHERE j.state = 'available' AND j.queue = %(queue)s AND j.priority = l.priority
          AND j.run_at <= now() - make_interval(secs => %(interval)s::float8)
          AND j.priority > {_EARNED}
        ORDER BY j.run_at, j.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) d
    WHERE l.priority IS NOT NULL
    LIMIT %(limit)s
)
UPDATE awa_jobs_hot j
SET original_priority = coalesce(j.original_priority, j.priority), priority = {_EARNED}
WHERE j.id = ANY(ARRAY(SELECT id FROM due))
""",
    returns_rows=False,
)


def job_age_priority(*, queue: str, interval: float, limit: int) -> Query[int]:
    """How many available jobs of `queue` gained priority (at most `limit`)."""
    params = {"queue": queue, "interval": interval, "limit": limit}
    return Query(JOB_AGE_PRIORITY, params, query.rowcount)
