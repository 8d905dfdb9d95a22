"""Statements on `awa_active_leases`: the narrow, write-hot table of live attempts."""

from __future__ import annotations

from awa_django.storage.sql import Statement

# Params: ids int8[], leases int8[] (sorted by id: one lock order for every writer).
# Touches only the narrow lease table (primary key lookups); returns the pairs still owned,
# so the worker learns which of its attempts were rescued or cancelled meanwhile.
lease_heartbeat_many = Statement(
    "lease_heartbeat_many",
    """
UPDATE awa_active_leases l SET heartbeat_at = now()
FROM unnest(%(ids)s::int8[], %(leases)s::int8[]) AS t(id, run_lease)
WHERE l.job_id = t.id AND l.run_lease = t.run_lease
RETURNING l.job_id, l.run_lease
""",
)


# Params: ids int8[] (jobs a cancel just finalized). Its own statement, so it has a fresh
# snapshot that sees every lease committed while admin.job_cancel_many waited for its row
# locks (a claim, a resume_external). Index: awa_active_leases primary key.
lease_delete_for_jobs = Statement(
    "lease_delete_for_jobs",
    """
DELETE FROM awa_active_leases l USING awa_jobs_hot j
WHERE l.job_id = ANY(%(ids)s::int8[]) AND j.id = l.job_id
  AND j.state IN ('completed', 'failed', 'cancelled')
""",
)


# Params: staleness_seconds. Removes stale leases whose job no longer runs under them (a
# worker died during a sequential callback wait, or a lease outlived its job): they guard
# nothing, and leaving them would only mislead the dashboard. Index: awa_leases_heartbeat_idx.
lease_delete_orphans = Statement(
    "lease_delete_orphans",
    """
DELETE FROM awa_active_leases l
WHERE l.heartbeat_at < now() - make_interval(secs => %(staleness_seconds)s::float8)
  AND NOT EXISTS (SELECT 1 FROM awa_jobs_hot j
                  WHERE j.id = l.job_id AND j.run_lease = l.run_lease AND j.state = 'running')
""",
)
