"""Statements on `awa_worker_instances`, the liveness table the dashboard reads."""

from __future__ import annotations

from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement

# Params: worker_id, hostname, pid, queues (json text), leader, shutting_down,
# completed_count, kinds (json text), serves_tasks, hooks_dropped. One upsert every few
# seconds per worker process.
WORKER_INSTANCE_UPSERT = Statement(
    "worker_instance_upsert",
    """
INSERT INTO awa_worker_instances (worker_id, hostname, pid, queues, started_at, last_seen_at,
                                  leader, shutting_down, completed_count, kinds,
                                  serves_tasks, hooks_dropped)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(queues)s::jsonb, now(), now(), %(leader)s,
        %(shutting_down)s, %(completed_count)s, %(kinds)s::jsonb, %(serves_tasks)s,
        %(hooks_dropped)s)
ON CONFLICT (worker_id) DO UPDATE
SET last_seen_at = now(), leader = EXCLUDED.leader, shutting_down = EXCLUDED.shutting_down,
    completed_count = EXCLUDED.completed_count, queues = EXCLUDED.queues,
    kinds = EXCLUDED.kinds, serves_tasks = EXCLUDED.serves_tasks,
    hooks_dropped = EXCLUDED.hooks_dropped
""",
    returns_rows=False,
)


def worker_instance_upsert(
    *,
    worker_id: str,
    hostname: str,
    pid: int,
    queues: str,
    leader: bool,
    shutting_down: bool,
    completed_count: int,
    kinds: str = "[]",
    serves_tasks: bool = False,
    hooks_dropped: int = 0,
) -> Query[int]:
    """`queues` is the JSON text of {queue: concurrency}, `kinds` of the handled kinds."""
    params = {
        "worker_id": worker_id,
        "hostname": hostname,
        "pid": pid,
        "queues": queues,
        "leader": leader,
        "shutting_down": shutting_down,
        "completed_count": completed_count,
        "kinds": kinds,
        "serves_tasks": serves_tasks,
        "hooks_dropped": hooks_dropped,
    }
    return Query(WORKER_INSTANCE_UPSERT, params, query.rowcount)


# Params: worker_id. A worker that exits cleanly removes its own row.
WORKER_INSTANCE_DELETE = Statement(
    "worker_instance_delete",
    "DELETE FROM awa_worker_instances WHERE worker_id = %(worker_id)s",
    returns_rows=False,
)


def worker_instance_delete(*, worker_id: str) -> Query[int]:
    return Query(WORKER_INSTANCE_DELETE, {"worker_id": worker_id}, query.rowcount)


# Params: older_than_seconds. The leader forgets workers that vanished without a goodbye.
WORKER_INSTANCE_PRUNE = Statement(
    "worker_instance_prune",
    """
DELETE FROM awa_worker_instances
WHERE last_seen_at < now() - make_interval(secs => %(older_than_seconds)s::float8)
""",
    returns_rows=False,
)


def worker_instance_prune(*, older_than_seconds: float) -> Query[int]:
    return Query(WORKER_INSTANCE_PRUNE, {"older_than_seconds": older_than_seconds}, query.rowcount)
