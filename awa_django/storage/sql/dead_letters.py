"""Statements on `awa_dead_letters`: the guarded moves of a job into the dead letters (the
attempt's, and the fragments the rescue and `fail_external` share), the retry back into
`awa_jobs_hot`, the move of already-failed jobs, and retention pruning (decision 016).

A move is one statement: a CTE deletes the job row (guarded exactly as the transition it
replaces) and inserts what it returned into `awa_dead_letters`, so a stale attempt moves
nothing and a dead letter never also exists as a job. Leaving `awa_jobs_hot` frees the
job's unique key. Each move returns the job's row as it left, shaped as a `JobSnapshot`
in state `failed`, for the `Exhausted` event.
"""

from __future__ import annotations

from collections.abc import Sequence

from awa_django.channels import channel_sql
from awa_django.snapshot import COLUMNS, JSON_COLUMNS, JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.fragments import ATTEMPT_ERRORS, JOB_COLUMNS, UNIQUE_ARBITER
from awa_django.storage.sql.transitions import released

# The columns a dead letter copies from its job row, in both tables' names.
_COPIED = (
    "id, kind, queue, args, priority, attempt, max_attempts, run_lease, created_at, "
    "attempted_at, metadata, tags, attempted_by, django_task, unique_key, unique_states"
)


def enter(moved: str, *, errors: str, progress: str, reason: str) -> str:
    """The INSERT (a CTE body) that files every row of the CTE `moved` (a DELETE ...
    RETURNING * of `awa_jobs_hot`) as a dead letter with `errors`, `progress` and `reason`
    (SQL expressions over `moved`'s columns)."""
    return f"""
    INSERT INTO awa_dead_letters ({_COPIED}, errors, progress, reason, dead_lettered_at)
    SELECT {_COPIED}, {errors}, {progress}, {reason}, now() FROM {moved}
    RETURNING id, errors, progress, dead_lettered_at"""


# How a dead letter reads as the job row it was (a JobSnapshot in state `failed`): `d` is
# the INSERT's RETURNING, `m` the deleted job row.
_AS_FAILED_JOB = {
    "state": "'failed'",
    "finalized_at": "d.dead_lettered_at",
    "errors": "d.errors::text",
    "progress": "d.progress::text",
    "callback_id": "NULL::uuid",
    "callback_timeout_at": "NULL::timestamptz",
    "result": "NULL::text",
}
AS_FAILED_JOB = ", ".join(
    f"{_AS_FAILED_JOB[name]} AS {name}"
    if name in _AS_FAILED_JOB
    else (f"m.{name}::text AS {name}" if name in JSON_COLUMNS else f"m.{name}")
    for name in COLUMNS
)

# Params: id, run_lease, reason, error (text or NULL), error_type (or NULL), terminal,
# progress (json text or NULL: keep the stored one). The dead-letter twin of
# job_set_state_if_running for a `failed` transition of a dead-letter queue: same guard
# (id, state='running', run_lease), same error entry, the lease released in the statement.
# Index: primary keys only. Zero rows = stale outcome.
JOB_DEAD_LETTER_IF_RUNNING = Statement(
    "job_dead_letter_if_running",
    f"""
WITH moved AS (
    DELETE FROM awa_jobs_hot
    WHERE id = %(id)s AND state = 'running' AND run_lease = %(run_lease)s
    RETURNING *
), {released("moved", attempt=True)}, entered AS ({
        enter(
            "moved",
            errors=ATTEMPT_ERRORS,
            progress="coalesce(%(progress)s::jsonb, progress)",
            reason="%(reason)s::text",
        )
    }
)
SELECT {AS_FAILED_JOB} FROM entered d JOIN moved m ON m.id = d.id
""",
)


def job_dead_letter_if_running(
    *,
    id: int,
    run_lease: int,
    reason: str,
    error: str | None,
    error_type: str | None,
    terminal: bool,
    progress: str | None,
) -> Query[JobSnapshot | None]:
    """The job's row as it left (state `failed`), or None when the outcome is stale."""
    params = {
        "id": id,
        "run_lease": run_lease,
        "reason": reason,
        "error": error,
        "error_type": error_type,
        "terminal": terminal,
        "progress": progress,
    }
    return Query(JOB_DEAD_LETTER_IF_RUNNING, params, query.first_job)


# Workflows (decision 043): a dead letter keeps its edges (the deletion trigger leaves a
# dead-lettered job's rows), so a retried one is flagged again from them, and a retried
# parent reopens its edges: its children count it pending again and those its failure
# cancelled wait again (awa_workflow_parent_reopened, migration 0013).
_HAS_DEPENDENTS = (
    "(EXISTS (SELECT 1 FROM awa_job_dependencies d WHERE d.parent_id = picked.id)"
    " OR EXISTS (SELECT 1 FROM awa_batch_members m WHERE m.job_id = picked.id))"
)
_HAS_PARENTS = "EXISTS (SELECT 1 FROM awa_job_waits w WHERE w.job_id = picked.id)"

# Params: ids int8[] (sorted), queue (text or NULL: keep), priority (int2 or NULL: keep).
# T26 with our guard kept: each dead letter goes back into awa_jobs_hot under its id as
# `available` now, attempt 0, callback and progress cleared, errors and run_lease kept
# (a reset run_lease would let an attempt of the job's earlier life pass a later guard).
# A row whose unique key a live job holds is not inserted (the arbiter's DO NOTHING) and
# stays a dead letter; only inserted rows are deleted. Index: primary keys, and
# awa_jobs_unique_idx as the arbiter. Returns the new job rows; wakes their queues.
DEAD_LETTER_RETRY_MANY = Statement(
    "dead_letter_retry_many",
    f"""
WITH picked AS (
    SELECT * FROM awa_dead_letters WHERE id = ANY(%(ids)s::int8[]) ORDER BY id FOR UPDATE
), inserted AS (
    INSERT INTO awa_jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts,
                              run_at, created_at, attempted_at, run_lease, errors,
                              metadata, tags, attempted_by, django_task, unique_key,
                              unique_states, has_dependents, has_parents)
    SELECT id, kind, coalesce(%(queue)s::text, queue), args, 'available',
           coalesce(%(priority)s::int2, priority), 0, max_attempts, now(), created_at,
           attempted_at, run_lease, errors, metadata, tags, attempted_by, django_task,
           unique_key, unique_states, {_HAS_DEPENDENTS}, {_HAS_PARENTS}
    FROM picked ORDER BY id
    ON CONFLICT {UNIQUE_ARBITER} DO NOTHING
    RETURNING {JOB_COLUMNS}, has_dependents
), removed AS (
    DELETE FROM awa_dead_letters d USING inserted i WHERE d.id = i.id
), reopened AS (
    SELECT count(awa_workflow_parent_reopened(i.id)) AS parents
    FROM inserted i WHERE i.has_dependents
)
SELECT i.*, pg_notify({channel_sql("queue")}, '')::text
FROM inserted i CROSS JOIN reopened ORDER BY i.id
""",
)


def dead_letter_retry_many(
    *, ids: Sequence[int], queue: str | None, priority: int | None
) -> Query[list[JobSnapshot]]:
    """The jobs back in `awa_jobs_hot`; an id missing from them was gone or conflicted."""
    params = {"ids": sorted(ids), "queue": queue, "priority": priority}
    return Query(DEAD_LETTER_RETRY_MANY, params, query.jobs)


# Params: ids int8[]. T25 by an operator: the `failed` jobs among `ids` move into the dead
# letters with reason `manual`, unchanged otherwise (a job retried meanwhile is left).
# Index: primary key. Returns how many moved.
DEAD_LETTER_ENTER_FAILED = Statement(
    "dead_letter_enter_failed",
    f"""
WITH moved AS (
    DELETE FROM awa_jobs_hot WHERE id = ANY(%(ids)s::int8[]) AND state = 'failed'
    RETURNING *
), entered AS ({enter("moved", errors="errors", progress="progress", reason="'manual'")})
SELECT count(*) FROM entered
""",
)


def dead_letter_enter_failed(*, ids: Sequence[int]) -> Query[int]:
    return Query(DEAD_LETTER_ENTER_FAILED, {"ids": sorted(ids)}, _count)


def _count(rows: query.Rows, count: int) -> int:
    return int(rows[0][0]) if rows else 0


# Params: retention_seconds, limit. Index: awa_dead_letters_at_idx (dead_lettered_at, id),
# a plain range. Small batches keep each delete short.
DEAD_LETTER_PRUNE = Statement(
    "dead_letter_prune",
    """
WITH old AS (
    SELECT id FROM awa_dead_letters
    WHERE dead_lettered_at < now() - make_interval(secs => %(retention_seconds)s::float8)
    ORDER BY dead_lettered_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM awa_dead_letters d USING old WHERE d.id = old.id
""",
    returns_rows=False,
)


def dead_letter_prune(*, retention_seconds: float, limit: int) -> Query[int]:
    """How many dead letters past their retention were deleted."""
    params = {"retention_seconds": retention_seconds, "limit": limit}
    return Query(DEAD_LETTER_PRUNE, params, query.rowcount)
