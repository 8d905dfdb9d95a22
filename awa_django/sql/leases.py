"""Statements on `awa_active_leases`: the narrow, write-hot table of live attempts."""

from __future__ import annotations

from . import Statement

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
