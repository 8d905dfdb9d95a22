"""Statements that resolve external callbacks (reference T12-T15, §6.3).

Every statement finds its job through the callback id. Index: `awa_jobs_callback_uniq`, the
partial unique index on (callback_id) WHERE callback_id IS NOT NULL; `callback_id = $id`
implies the index predicate, so the lookup is one index probe whatever the table size.

At-most-once resolution: each resolution clears callback_id in the same UPDATE that moves
the job. A concurrent resolver (or the callback-timeout rescue) blocked on the row lock
re-evaluates its WHERE against the committed row once the lock is released; callback_id is
NULL by then, so it matches zero rows and the Client raises CallbackNotFound. The rescue
uses SKIP LOCKED, so it simply skips a row a resolver holds.

The optional `run_lease` parameter (NULL = any) is the extra guard of §6.3: a caller that
knows which attempt registered the callback can refuse to touch a newer one.

Each transition is the catalogue's (transitions.py); resolving a callback consumes it
(CALLBACK_CLEARED) and deletes whatever lease the job has: that also drops the lease of a
job still running when its callback was resolved, so that attempt's heartbeat learns it
lost.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from awa_django.snapshot import COLUMNS, JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement, dead_letters
from awa_django.storage.sql.fragments import (
    J_JOB_COLUMNS,
    JOB_COLUMN_NAMES,
    JOB_COLUMNS,
    append_error,
    error_entry,
)
from awa_django.storage.sql.transitions import (
    CALLBACK_CLEARED,
    COMPLETE,
    FAIL,
    RESUME,
    RETRY,
    dead_lettered_sql,
    update,
)

# The guard shared by complete, fail, resume and resolve: waiting_external, or still
# running (the handler registered the callback but has not parked yet: the early-callback
# race of §3.2, after which the park statement matches zero rows).
_PENDING = """callback_id = %(callback_id)s::uuid
      AND state IN ('waiting_external', 'running')
      AND (%(run_lease)s::int8 IS NULL OR run_lease = %(run_lease)s::int8)"""


def _pending(callback_id: uuid.UUID, run_lease: int | None) -> dict[str, object]:
    return {"callback_id": callback_id, "run_lease": run_lease}


# Params: callback_id uuid, run_lease int8|NULL. T13 (transitions.COMPLETE, no result):
# the callback, and any unread resume payload, consumed; lease deleted.
JOB_COMPLETE_EXTERNAL = Statement(
    "job_complete_external",
    f"""
WITH moved AS (
    {update(COMPLETE, *CALLBACK_CLEARED, where=_PENDING, returning=JOB_COLUMNS, alias="")}
), {COMPLETE.released("moved")}
SELECT * FROM moved
""",
)


def job_complete_external(
    *, callback_id: uuid.UUID, run_lease: int | None
) -> Query[JobSnapshot | None]:
    return Query(JOB_COMPLETE_EXTERNAL, _pending(callback_id, run_lease), query.first_job)


_FAILED_ENTRY = append_error("errors", error_entry("%(error)s::text", "attempt", terminal="true"))
_DEAD = dead_lettered_sql()

# Params: callback_id uuid, run_lease int8|NULL, error text, dead_letter_queues text[].
# T14 (transitions.FAIL): a terminal error entry for the current attempt; the callback
# consumed, progress kept, lease deleted. A job of a dead-letter queue moves to the dead
# letters as `callback_failed` instead, in the same statement (decision 016): the UPDATE
# and the DELETE each take only the rows of their kind of queue, so each row is touched
# once.
JOB_FAIL_EXTERNAL = Statement(
    "job_fail_external",
    f"""
WITH failed AS (
    {
        update(
            FAIL,
            ("errors", _FAILED_ENTRY),
            where=f"{_PENDING} AND NOT {_DEAD}",
            returning=JOB_COLUMNS,
            alias="",
        )
    }
), dead AS (
    DELETE FROM awa_jobs_hot WHERE {_PENDING} AND {_DEAD}
    RETURNING *
), entered AS ({
        dead_letters.enter(
            "dead", errors=_FAILED_ENTRY, progress="progress", reason="'callback_failed'"
        )
    }
), moved AS (
    SELECT * FROM failed
    UNION ALL
    SELECT {dead_letters.AS_FAILED_JOB} FROM entered d JOIN dead m ON m.id = d.id
), {FAIL.released("moved")}
SELECT * FROM moved
""",
)


def job_fail_external(
    *,
    callback_id: uuid.UUID,
    run_lease: int | None,
    error: str,
    dead_letter_queues: Sequence[str] = (),
) -> Query[JobSnapshot | None]:
    """The failed row; on a `dead_letter_queues` queue, the row as it left for the dead
    letters (still state `failed`)."""
    params = {
        **_pending(callback_id, run_lease),
        "error": error,
        "dead_letter_queues": list(dead_letter_queues),
    }
    return Query(JOB_FAIL_EXTERNAL, params, query.first_job)


# Params: callback_id uuid. T15 (transitions.RETRY): waiting_external only (a running
# handler still owns its attempt). The CTE locks the
# row first so the parked attempt (needed by the Retried event) is read from the very row
# version the UPDATE replaces; PostgreSQL 15 has no RETURNING OLD. Returns the job row, then
# parked_attempt, then the NOTIFY that wakes the queue's dispatchers on commit.
JOB_RETRY_EXTERNAL = Statement(
    "job_retry_external",
    f"""
WITH target AS (
    SELECT id, attempt AS parked_attempt FROM awa_jobs_hot
    WHERE callback_id = %(callback_id)s::uuid AND {RETRY.guard()}
    FOR UPDATE
), moved AS (
    {
        update(
            RETRY,
            source="target t",
            where=f"j.id = t.id AND {RETRY.guard('j')}",
            returning=f"{J_JOB_COLUMNS}, t.parked_attempt",
        )
    }
), {RETRY.released("moved")}
SELECT {JOB_COLUMN_NAMES}, parked_attempt, {RETRY.notify_row()}
FROM moved
""",
)


def job_retry_external(*, callback_id: uuid.UUID) -> Query[tuple[JobSnapshot, int] | None]:
    """(the committed row, the attempt it was parked in), or None."""
    return Query(JOB_RETRY_EXTERNAL, {"callback_id": callback_id}, _with_parked_attempt)


def _with_parked_attempt(rows: query.Rows, count: int) -> tuple[JobSnapshot, int] | None:
    return (JobSnapshot.from_row(rows[0]), rows[0][len(COLUMNS)]) if rows else None


# Params: callback_id uuid, run_lease int8|NULL, payload (json text). T12
# (transitions.RESUME): → running with the payload in callback_result, which the waiting
# handler reads and clears. Awa sets heartbeat_at = now here; our heartbeat lives on the
# lease, so the lease is refreshed, or created unowned (worker_id '') when the job was
# parked and has none: a resumed job that no handler waits for is then rescued by the
# stale-heartbeat sweep and runs again, instead of sitting in `running` forever. A handler
# still running (a callback resolved before its wait) may have no lease yet (decision
# 030): its first heartbeat adopts the unowned one. This attempt's lease keeps its worker,
# claim time and deadline; a lease another attempt left is taken over whole (deadline
# NULL, like a new one).
JOB_RESUME_EXTERNAL = Statement(
    "job_resume_external",
    f"""
WITH moved AS (
    {
        update(
            RESUME,
            *CALLBACK_CLEARED,
            where=_PENDING,
            returning=JOB_COLUMNS,
            alias="",
            callback_result="%(payload)s::jsonb",
        )
    }
), leased AS (
    INSERT INTO awa_active_leases AS l (job_id, run_lease, queue, worker_id, claimed_at,
                                        heartbeat_at)
    SELECT id, run_lease, queue, '', now(), now() FROM moved
    ON CONFLICT (job_id) DO UPDATE
    SET run_lease = EXCLUDED.run_lease, heartbeat_at = EXCLUDED.heartbeat_at,
        worker_id = CASE WHEN l.run_lease = EXCLUDED.run_lease THEN l.worker_id
                         ELSE EXCLUDED.worker_id END,
        claimed_at = CASE WHEN l.run_lease = EXCLUDED.run_lease THEN l.claimed_at
                          ELSE EXCLUDED.claimed_at END,
        deadline_at = CASE WHEN l.run_lease = EXCLUDED.run_lease THEN l.deadline_at END
)
SELECT * FROM moved
""",
)


def job_resume_external(
    *, callback_id: uuid.UUID, run_lease: int | None, payload: str
) -> Query[JobSnapshot | None]:
    """`payload` is JSON text ('null' for none: SQL NULL would mean "nothing pending")."""
    params = {**_pending(callback_id, run_lease), "payload": payload}
    return Query(JOB_RESUME_EXTERNAL, params, query.first_job)


# Params: callback_id uuid, timeout_seconds float8 (finite, >= 0, checked by the Client).
# waiting_external only; the new timeout is on the database clock.
JOB_HEARTBEAT_CALLBACK = Statement(
    "job_heartbeat_callback",
    f"""
UPDATE awa_jobs_hot
SET callback_timeout_at = now() + make_interval(secs => %(timeout_seconds)s::float8)
WHERE callback_id = %(callback_id)s::uuid AND state = 'waiting_external'
RETURNING {JOB_COLUMNS}
""",
)


def job_heartbeat_callback(
    *, callback_id: uuid.UUID, timeout_seconds: float
) -> Query[JobSnapshot | None]:
    params = {"callback_id": callback_id, "timeout_seconds": timeout_seconds}
    return Query(JOB_HEARTBEAT_CALLBACK, params, query.first_job)


# Params: callback_id uuid, run_lease int8|NULL. resolve_callback locks the pending row
# FOR UPDATE, decides, then runs complete or fail in the same transaction, so two
# concurrent resolve_callback calls are serialised and the second finds nothing.
JOB_LOCK_BY_CALLBACK = Statement(
    "job_lock_by_callback",
    f"SELECT {JOB_COLUMNS} FROM awa_jobs_hot WHERE {_PENDING} FOR UPDATE",
)


def job_lock_by_callback(
    *, callback_id: uuid.UUID, run_lease: int | None
) -> Query[JobSnapshot | None]:
    return Query(JOB_LOCK_BY_CALLBACK, _pending(callback_id, run_lease), query.first_job)
