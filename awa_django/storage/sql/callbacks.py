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
"""

from __future__ import annotations

from awa_django.channels import channel_sql
from awa_django.snapshot import RETURNING_COLUMNS as COLS
from awa_django.storage.sql import Statement

_J_COLS = ", ".join("j." + c for c in COLS.split(", "))

# The guard shared by complete, fail, resume and resolve: waiting_external, or still
# running (the handler registered the callback but has not parked yet: the early-callback
# race of §3.2, after which the park statement matches zero rows).
_PENDING = """callback_id = %(callback_id)s::uuid
      AND state IN ('waiting_external', 'running')
      AND (%(run_lease)s::int8 IS NULL OR run_lease = %(run_lease)s::int8)"""

# A finished job owns no lease: deleting by job_id also drops the lease of a job that was
# still running when its callback was resolved, so that attempt's heartbeat learns it lost.
_RELEASE = "DELETE FROM awa_active_leases l USING moved m WHERE l.job_id = m.id"

# Params: callback_id uuid, run_lease int8|NULL. T13: → completed; finalized_at now,
# callback and progress cleared, lease deleted. The payload is not stored.
job_complete_external = Statement(
    "job_complete_external",
    f"""
WITH moved AS (
    UPDATE awa_jobs_hot
    SET state = 'completed', finalized_at = now(), callback_id = NULL,
        callback_timeout_at = NULL, progress = NULL
    WHERE {_PENDING}
    RETURNING {COLS}
), released AS ({_RELEASE})
SELECT {COLS} FROM moved
""",
)

# Params: callback_id uuid, run_lease int8|NULL, error text. T14: → failed with a terminal
# error entry for the current attempt; callback cleared, progress kept, lease deleted.
job_fail_external = Statement(
    "job_fail_external",
    f"""
WITH moved AS (
    UPDATE awa_jobs_hot
    SET state = 'failed', finalized_at = now(), callback_id = NULL,
        callback_timeout_at = NULL,
        errors = errors || jsonb_build_array(jsonb_build_object(
            'error', %(error)s::text, 'attempt', attempt, 'at', now(), 'terminal', true))
    WHERE {_PENDING}
    RETURNING {COLS}
), released AS ({_RELEASE})
SELECT {COLS} FROM moved
""",
)

# Params: callback_id uuid. T15: waiting_external only (a running handler still owns its
# attempt) → available with attempt reset, run_at now, callback cleared. The CTE locks the
# row first so the parked attempt (needed by the Retried event) is read from the very row
# version the UPDATE replaces; PostgreSQL 15 has no RETURNING OLD. Returns the job row, then
# parked_attempt, then the NOTIFY that wakes the queue's dispatchers on commit.
job_retry_external = Statement(
    "job_retry_external",
    f"""
WITH target AS (
    SELECT id, attempt AS parked_attempt FROM awa_jobs_hot
    WHERE callback_id = %(callback_id)s::uuid AND state = 'waiting_external'
    FOR UPDATE
), moved AS (
    UPDATE awa_jobs_hot j
    SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL
    FROM target t
    WHERE j.id = t.id AND j.state = 'waiting_external'
    RETURNING {_J_COLS}, t.parked_attempt
), released AS ({_RELEASE})
SELECT {COLS}, parked_attempt, pg_notify({channel_sql("queue")}, '')::text FROM moved
""",
)

# Params: callback_id uuid, run_lease int8|NULL, payload (json text). T12: → running with the
# payload under metadata._awa_callback_result, which the waiting handler reads and removes.
# Awa sets heartbeat_at = now here; our heartbeat lives on the lease, so the lease is
# refreshed, or created unowned (worker_id '') when the job was parked and has none: a
# resumed job that no handler waits for is then rescued by the stale-heartbeat sweep and
# runs again, instead of sitting in `running` forever. deadline_at stays as it was (NULL
# for a new lease), as in Awa.
job_resume_external = Statement(
    "job_resume_external",
    f"""
WITH moved AS (
    UPDATE awa_jobs_hot
    SET state = 'running', callback_id = NULL, callback_timeout_at = NULL,
        metadata = metadata || jsonb_build_object('_awa_callback_result', %(payload)s::jsonb)
    WHERE {_PENDING}
    RETURNING {COLS}
), leased AS (
    INSERT INTO awa_active_leases (job_id, run_lease, queue, worker_id, claimed_at,
                                   heartbeat_at)
    SELECT id, run_lease, queue, '', now(), now() FROM moved
    ON CONFLICT (job_id) DO UPDATE
    SET run_lease = EXCLUDED.run_lease, heartbeat_at = EXCLUDED.heartbeat_at
)
SELECT {COLS} FROM moved
""",
)

# Params: callback_id uuid, timeout_seconds float8 (finite, >= 0, checked by the Client).
# waiting_external only; the new timeout is on the database clock.
job_heartbeat_callback = Statement(
    "job_heartbeat_callback",
    f"""
UPDATE awa_jobs_hot
SET callback_timeout_at = now() + make_interval(secs => %(timeout_seconds)s::float8)
WHERE callback_id = %(callback_id)s::uuid AND state = 'waiting_external'
RETURNING {COLS}
""",
)

# Params: callback_id uuid, run_lease int8|NULL. resolve_callback locks the pending row
# FOR UPDATE, decides, then runs complete or fail in the same transaction, so two
# concurrent resolve_callback calls are serialised and the second finds nothing.
job_lock_by_callback = Statement(
    "job_lock_by_callback",
    f"SELECT {COLS} FROM awa_jobs_hot WHERE {_PENDING} FOR UPDATE",
)
