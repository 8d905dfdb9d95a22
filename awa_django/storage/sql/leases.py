"""Statements on `awa_active_leases`: the narrow, write-hot table of live attempts."""

from __future__ import annotations

from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.arrays import int_array
from awa_django.storage.sql.fragments import LAST_EPOCH, LEASE_EPOCH_SETTING

# No params. Run once on each runtime connection as it opens, in autocommit, before any
# claim (decision 029). Raises the epoch and keeps it in the session, where the claim reads
# it. The epoch must be on disk before a claim uses it, so that no crash can hand it out
# twice: the row's update writes WAL, and this transaction's commit waits for its flush
# even where the session, role or server default is `synchronous_commit = off` (`local`
# then, for this transaction only; a stronger setting stays). The upsert restores the row
# if the table was emptied (a `flush`, which empties the jobs with it). The epoch stops
# below 2**31 - 1, so the claims' `epoch * 2**24` can never overflow int8: past it the
# update matches nothing and the connection's claims stay durable.
LEASE_EPOCH_TAKE = Statement(
    "lease_epoch_take",
    f"""
WITH durable AS MATERIALIZED (
    SELECT CASE WHEN current_setting('synchronous_commit') = 'off'
                THEN set_config('synchronous_commit', 'local', true) END AS setting
)
INSERT INTO awa_lease_epochs AS e (id, epoch) VALUES (1, 1)
ON CONFLICT (id) DO UPDATE SET epoch = e.epoch + 1 WHERE e.epoch < {LAST_EPOCH}
RETURNING set_config('{LEASE_EPOCH_SETTING}', e.epoch::text, false)::int8,
          (SELECT setting FROM durable)
""",
)


def lease_epoch_take() -> Query[int | None]:
    """The epoch this connection's claims now use (None: none left, claims stay durable)."""
    return Query(LEASE_EPOCH_TAKE, {}, _epoch)


def _epoch(rows: query.Rows, count: int) -> int | None:
    return int(rows[0][0]) if rows else None


# Params: ids int8[], leases int8[], deadlines float8[] (seconds, 0 = none: each job's
# queue's), sorted by id: one lock order for every writer. Owned means the job still runs
# (or waits for its callback in a sequential wait) under that run_lease; returns the pairs
# still owned, so the worker learns which of its attempts were rescued or cancelled
# meanwhile. Index: the job's primary key, then the lease's. The state test is written so
# that no index serves it (`|| ''`), as in the completion (decision 027): the state index's
# `running` entries include every job claimed since the oldest open snapshot.
# The first beat of an attempt writes its lease row (decision 030: claims do not, unless
# the deadline is short): claimed_at is the claim's attempted_at, the worker the last of
# attempted_by, the deadline counted from the claim. Later beats move heartbeat_at only;
# an unowned lease of this attempt (worker '', from resume_external before the first beat)
# gets its worker and claim time.
# A lease left by an earlier attempt of the job is taken over; a later attempt's lease is
# never overwritten (run_lease only grows). A job that ends while the beat runs may keep a
# lease the beat wrote after its outcome's delete: the same worker's heartbeat removes it
# once the outcome committed (lease_delete_ended, decision 033).
LEASE_HEARTBEAT_MANY = Statement(
    "lease_heartbeat_many",
    """
INSERT INTO awa_active_leases AS l (job_id, run_lease, queue, worker_id, claimed_at,
                                    heartbeat_at, deadline_at)
SELECT j.id, j.run_lease, j.queue, coalesce(j.attempted_by[cardinality(j.attempted_by)], ''),
       coalesce(j.attempted_at, now()), now(),
       CASE WHEN j.state = 'running' AND t.deadline > 0
            THEN j.attempted_at + make_interval(secs => t.deadline) END
FROM unnest(%(ids)s::int8[], %(leases)s::int8[], %(deadlines)s::float8[])
     AS t(id, run_lease, deadline)
JOIN awa_jobs_hot j ON j.id = t.id AND j.run_lease = t.run_lease
WHERE j.state || '' IN ('running', 'waiting_external')
ORDER BY j.id
ON CONFLICT (job_id) DO UPDATE
SET heartbeat_at = now(),
    run_lease = EXCLUDED.run_lease,
    queue = EXCLUDED.queue,
    worker_id = CASE WHEN l.run_lease = EXCLUDED.run_lease AND l.worker_id <> ''
                     THEN l.worker_id ELSE EXCLUDED.worker_id END,
    claimed_at = CASE WHEN l.run_lease = EXCLUDED.run_lease AND l.worker_id <> ''
                      THEN l.claimed_at ELSE EXCLUDED.claimed_at END,
    deadline_at = CASE WHEN l.run_lease = EXCLUDED.run_lease THEN l.deadline_at
                       ELSE EXCLUDED.deadline_at END
WHERE l.run_lease <= EXCLUDED.run_lease
RETURNING l.job_id, l.run_lease
""",
)


def lease_heartbeat_many(
    *, ids: list[int], leases: list[int], deadlines: list[float]
) -> Query[set[tuple[int, int]]]:
    """The (job id, run_lease) pairs still owned after the beat."""
    # Floats all: psycopg refuses a list that mixes int and float (a queue's deadline is
    # whatever the settings said).
    params = {"ids": ids, "leases": leases, "deadlines": [float(d) for d in deadlines]}
    return Query(LEASE_HEARTBEAT_MANY, params, _pairs)


def _pairs(rows: query.Rows, count: int) -> set[tuple[int, int]]:
    return {(row[0], row[1]) for row in rows}


# Params: ids int8[] (jobs a cancel just finalized). Its own statement, so it has a fresh
# snapshot that sees every lease committed while admin.job_cancel_many waited for its row
# locks (a claim, a resume_external). Index: awa_active_leases primary key.
LEASE_DELETE_FOR_JOBS = Statement(
    "lease_delete_for_jobs",
    """
DELETE FROM awa_active_leases l USING awa_jobs_hot j
WHERE l.job_id = ANY(%(ids)s::int8[]) AND j.id = l.job_id
  AND j.state IN ('completed', 'failed', 'cancelled')
""",
    returns_rows=False,
)


def lease_delete_for_jobs(*, ids: list[int]) -> Query[int]:
    return Query(LEASE_DELETE_FOR_JOBS, {"ids": ids}, query.rowcount)


# Params: ids int8[], leases int8[] (sorted by id): attempts this worker's heartbeat beat
# while they were ending, whose outcome has since committed (decision 033). Deletes their
# lease unless the job still runs under it (an outcome given up at a forced stop leaves
# the attempt to rescue, which reads the lease). A later attempt's lease has another
# run_lease and is left alone. Index: awa_active_leases primary key, then the job's.
LEASE_DELETE_ENDED = Statement(
    "lease_delete_ended",
    """
DELETE FROM awa_active_leases l
USING unnest(%(ids)s::int8[], %(leases)s::int8[]) AS t(id, run_lease)
WHERE l.job_id = t.id AND l.run_lease = t.run_lease
  AND NOT EXISTS (SELECT 1 FROM awa_jobs_hot j
                  WHERE j.id = l.job_id AND j.run_lease = l.run_lease AND j.state = 'running')
""",
    returns_rows=False,
)


def lease_delete_ended(*, ids: list[int], leases: list[int]) -> Query[int]:
    return Query(
        LEASE_DELETE_ENDED, {"ids": int_array(ids), "leases": int_array(leases)}, query.rowcount
    )


# Params: staleness_seconds. Removes stale leases whose job no longer runs under them (a
# worker died during a sequential callback wait, or a lease outlived its job): they guard
# nothing, and leaving them would only mislead the dashboard. Index: awa_leases_heartbeat_idx.
LEASE_DELETE_ORPHANS = Statement(
    "lease_delete_orphans",
    """
DELETE FROM awa_active_leases l
WHERE l.heartbeat_at < now() - make_interval(secs => %(staleness_seconds)s::float8)
  AND NOT EXISTS (SELECT 1 FROM awa_jobs_hot j
                  WHERE j.id = l.job_id AND j.run_lease = l.run_lease AND j.state = 'running')
""",
    returns_rows=False,
)


def lease_delete_orphans(*, staleness_seconds: float) -> Query[int]:
    return Query(LEASE_DELETE_ORPHANS, {"staleness_seconds": staleness_seconds}, query.rowcount)
