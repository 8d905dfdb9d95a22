"""Statements on `awa_worker_instances`, the liveness table the dashboard reads."""

from __future__ import annotations

from awa_django.storage.sql import Statement

# Params: worker_id, hostname, pid, queues (json text), leader, shutting_down,
# completed_count. One upsert every few seconds per worker process.
worker_instance_upsert = Statement(
    "worker_instance_upsert",
    """
INSERT INTO awa_worker_instances (worker_id, hostname, pid, queues, started_at, last_seen_at,
                                  leader, shutting_down, completed_count)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(queues)s::jsonb, now(), now(), %(leader)s,
        %(shutting_down)s, %(completed_count)s)
ON CONFLICT (worker_id) DO UPDATE
SET last_seen_at = now(), leader = EXCLUDED.leader, shutting_down = EXCLUDED.shutting_down,
    completed_count = EXCLUDED.completed_count, queues = EXCLUDED.queues
""",
)

# Params: worker_id. A worker that exits cleanly removes its own row.
worker_instance_delete = Statement(
    "worker_instance_delete", "DELETE FROM awa_worker_instances WHERE worker_id = %(worker_id)s"
)

# Params: older_than_seconds. The leader forgets workers that vanished without a goodbye.
worker_instance_prune = Statement(
    "worker_instance_prune",
    """
DELETE FROM awa_worker_instances
WHERE last_seen_at < now() - make_interval(secs => %(older_than_seconds)s::float8)
""",
)
