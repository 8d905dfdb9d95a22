"""Statements of workflows (decision 043): locking the parents of a child at enqueue,
linking the child to them, reading a child's parents and a cancelled flow's waiting
descendants; claiming the events the trigger owes (decision 046). The fan-in itself is
the trigger of migration 0013, not a statement here: every transition of a parent runs
it, whichever statement made the transition.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from awa_django.snapshot import COLUMNS, JobSnapshot, ParentResult
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.fragments import J_JOB_COLUMNS

# Params: ids int8[] (sorted). Locks each parent that is a job in id order (two children
# enqueued at once after overlapping parents never deadlock) and flags it
# `has_dependents`, so its transitions run the trigger from now on. The lock is held until
# the caller's transaction ends: a parent's transition waits for the child's edges to
# commit (its trigger then sees them), or the lock waits for the transition and reads the
# state it left (the edge is then written already resolved). A parent among the dead
# letters is locked there (against a concurrent dead-letter retry) and counts as failed.
# Nothing is written unless every parent was found (a missing one makes the caller raise
# ParentNotFound without a savepoint to roll back to). Returns (id, ended state or NULL,
# dead-lettered) per parent found; a missing id is absent.
# Index: primary keys.
JOB_LOCK_PARENTS = Statement(
    "job_lock_parents",
    """
WITH locked AS (
    SELECT id, state, has_dependents FROM awa_jobs_hot
    WHERE id = ANY(%(ids)s::int8[]) ORDER BY id FOR NO KEY UPDATE
), dead AS (
    SELECT id FROM awa_dead_letters WHERE id = ANY(%(ids)s::int8[]) ORDER BY id FOR SHARE
), flagged AS (
    UPDATE awa_jobs_hot j SET has_dependents = true
    FROM locked l WHERE j.id = l.id AND NOT l.has_dependents
      AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM dead)
          >= cardinality(%(ids)s::int8[])
)
SELECT id, CASE WHEN state IN ('completed', 'failed', 'cancelled') THEN state END, false
FROM locked
UNION ALL
SELECT id, 'failed', true FROM dead WHERE id NOT IN (SELECT id FROM locked)
""",
)


def job_lock_parents(*, ids: Sequence[int]) -> Query[dict[int, str | None]]:
    """Each parent found, with how it ended already (None: not yet)."""
    return Query(JOB_LOCK_PARENTS, {"ids": sorted(ids)}, _ended)


def _ended(rows: query.Rows, count: int) -> dict[int, str | None]:
    return {row[0]: row[1] for row in rows}


# Params: child, parents int8[], ended text[] (same order), policy. The child row was just
# inserted `waiting_parents`; awa_workflow_link (migration 0013) writes its edges and
# counters and settles it at once (every parent completed: available; one failed: the
# policy). Returns the child's state after that (NULL: deleted, `discard`). Index: primary
# keys, whatever the statistics say: the functions run without sequential scans and test
# the state with `|| ''` (migration 0018; test_workflow_plans reads their plans).
JOB_LINK_PARENTS = Statement(
    "job_link_parents",
    """
SELECT awa_workflow_link(%(child)s, %(parents)s::int8[], %(ended)s::text[], %(policy)s::text)
""",
)


def job_link_parents(
    *, child: int, parents: dict[int, str | None], policy: str
) -> Query[str | None]:
    params = {
        "child": child,
        "parents": list(parents),
        "ended": list(parents.values()),
        "policy": policy,
    }
    return Query(JOB_LINK_PARENTS, params, _state)


def _state(rows: query.Rows, count: int) -> str | None:
    return rows[0][0] if rows else None


# Params: id (the child). Its parents in id order: how each ended (the edge's record,
# which outlives a pruned parent), its kind and, if it completed, its result; a parent
# among the dead letters is read from there. Index: awa_job_deps_child_idx, primary keys.
JOB_PARENTS = Statement(
    "job_parents",
    """
SELECT d.parent_id, coalesce(j.kind, dl.kind), d.parent_state,
       CASE WHEN d.parent_state = 'completed' THEN j.result::text END, dl.id IS NOT NULL
FROM awa_job_dependencies d
LEFT JOIN awa_jobs_hot j ON j.id = d.parent_id
LEFT JOIN awa_dead_letters dl ON dl.id = d.parent_id
WHERE d.child_id = %(id)s
ORDER BY d.parent_id
""",
)


def job_parents(*, id: int) -> Query[list[ParentResult]]:
    return Query(JOB_PARENTS, {"id": id}, _parents)


def _parents(rows: query.Rows, count: int) -> list[ParentResult]:
    return [
        ParentResult(
            id=parent_id,
            kind=kind,
            state=state,
            result=None if result is None else json.loads(result),
            dead_lettered=dead,
        )
        for parent_id, kind, state, result, dead in rows
    ]


# Params: ids int8[]. Every job that waits (`waiting_parents`) on one of `ids`, directly
# or through other waiting jobs: what a cascading cancel takes with it. Index:
# awa_job_dependencies' primary key (parent_id first), primary keys.
JOB_WAITING_DESCENDANTS = Statement(
    "job_waiting_descendants",
    """
WITH RECURSIVE down(id) AS (
    SELECT d.child_id FROM awa_job_dependencies d
    JOIN awa_jobs_hot j ON j.id = d.child_id AND j.state = 'waiting_parents'
    WHERE d.parent_id = ANY(%(ids)s::int8[])
    UNION
    SELECT d.child_id FROM down
    JOIN awa_job_dependencies d ON d.parent_id = down.id
    JOIN awa_jobs_hot j ON j.id = d.child_id AND j.state = 'waiting_parents'
)
SELECT id FROM down ORDER BY id
""",
)


def job_waiting_descendants(*, ids: Sequence[int]) -> Query[list[int]]:
    return Query(JOB_WAITING_DESCENDANTS, {"ids": sorted(ids)}, _ids)


def _ids(rows: query.Rows, count: int) -> list[int]:
    return [row[0] for row in rows]


# Params: limit. Claims the oldest `limit` rows of the outbox the fan-in trigger writes
# (migration 0015) and deletes them, returning each with its job's current row (NULL
# columns when the job is gone: pruned or deleted before the claim). SKIP LOCKED: the
# leader and an inline runner claiming at once take disjoint rows and never wait on each
# other; a row is deleted by exactly one committed claim, so its event is dispatched once
# (after that claim commits). Index: the outbox's primary key (oldest first; the table is
# small and transient, so a seq scan + sort is as good), the job by awa_jobs_hot_pkey
# (EXPLAIN with 200k jobs and 50 rows: nested loop, index-only probe per row).
EVENT_OUTBOX_CLAIM = Statement(
    "event_outbox_claim",
    f"""
WITH claimed AS (
    DELETE FROM awa_event_outbox o
    WHERE o.id IN (
        SELECT id FROM awa_event_outbox ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    )
    RETURNING o.id, o.job_id, o.event, o.reason
)
SELECT {J_JOB_COLUMNS}, c.job_id, c.event, c.reason
FROM claimed c LEFT JOIN awa_jobs_hot j ON j.id = c.job_id
ORDER BY c.id
""",
)


@dataclass(frozen=True, slots=True)
class Announcement:
    """One claimed outbox row: the event `event` ("cancelled") owed for job `job_id`, and
    the job's row as it is now (None: the job is gone)."""

    job_id: int
    event: str
    reason: str
    job: JobSnapshot | None


def event_outbox_claim(*, limit: int) -> Query[list[Announcement]]:
    """Up to `limit` announcements, deleted in the caller's transaction, oldest first."""
    return Query(EVENT_OUTBOX_CLAIM, {"limit": limit}, _announcements)


def _announcements(rows: query.Rows, count: int) -> list[Announcement]:
    width = len(COLUMNS)
    return [
        Announcement(
            job_id=row[width],
            event=row[width + 1],
            reason=row[width + 2],
            job=None if row[0] is None else JobSnapshot.from_row(row),
        )
        for row in rows
    ]


# Params: older_than_seconds, limit. Batches that finished past retention and kept no
# member: a member's row goes with its job (pruned, or a dead letter purged), and a member
# is pruned only once the batch's callbacks, its children, have ended. Nothing can join a
# batch after its insert, so a batch with no member left is one nobody can reach from a
# job any more; its counts are history. A member waiting in the dead letters keeps its
# batch (a retry reopens it). Index: awa_batches' primary key, and the member table's
# index on batch_id for each candidate; batches are one row per `batch()` call and this
# delete keeps their number bounded by the retention.
BATCH_PRUNE_FINISHED = Statement(
    "batch_prune_finished",
    """
DELETE FROM awa_batches WHERE id IN (
    SELECT b.id FROM awa_batches b
    WHERE b.finished_at < now() - make_interval(secs => %(older_than_seconds)s::float8)
      AND NOT EXISTS (SELECT 1 FROM awa_batch_members m WHERE m.batch_id = b.id)
    ORDER BY b.id LIMIT %(limit)s)
""",
    returns_rows=False,
)


def batch_prune_finished(*, older_than_seconds: float, limit: int) -> Query[int]:
    """How many batch rows were deleted."""
    params = {"older_than_seconds": older_than_seconds, "limit": limit}
    return Query(BATCH_PRUNE_FINISHED, params, query.rowcount)
