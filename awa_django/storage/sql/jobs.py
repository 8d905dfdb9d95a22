"""Statements on `awa_jobs_hot` (with the lease row where an attempt ends)."""

from __future__ import annotations

from awa_django.snapshot import RETURNING_COLUMNS as COLS
from awa_django.storage.sql import Statement

# Wake-up hints ride on the statement that makes jobs available, so enqueue stays one round
# trip: the uncorrelated sub-select runs once per statement (an InitPlan), never per row.
# Params: channels text[] (empty for jobs that are not available yet). NOTIFY is delivered
# only when the enclosing transaction commits, so listeners never see an uncommitted job.
_NOTIFY_ONCE = "(SELECT count(pg_notify(ch, '')) FROM unnest(%(channels)s::text[]) ch) >= 0"

# Params: kind, queue, args (json text), state ('available'|'scheduled'), priority,
# max_attempts, run_at (NULL = now()), metadata (json text), tags text[], channels text[].
# Index: none read; inserts maintain the partial dispatch/promotion indexes.
job_insert_one = Statement(
    "job_insert_one",
    f"""
WITH inserted AS (
    INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts,
                              run_at, created_at, run_lease, errors, metadata, tags,
                              attempted_by)
    VALUES (%(kind)s, %(queue)s, %(args)s::jsonb, %(state)s::text, %(priority)s, 0,
            %(max_attempts)s, coalesce(%(run_at)s::timestamptz, now()), now(), 0, '[]',
            %(metadata)s::jsonb, %(tags)s::text[], '{{}}')
    RETURNING {COLS}
)
SELECT {COLS} FROM inserted WHERE {_NOTIFY_ONCE}
""",
)

# Params: parallel arrays kinds, queues, args (json text[]), states, priorities,
# max_attempts, run_ats (NULL elements = now()), metadata (json text[]), tags (json text[]
# of string arrays: PostgreSQL has no ragged text[][]), channels text[] (distinct queues).
# One statement for any number of rows; returns ids in input order (WITH ORDINALITY).
job_insert_many = Statement(
    "job_insert_many",
    f"""
WITH inserted AS (
    INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts,
                              run_at, created_at, run_lease, errors, metadata, tags,
                              attempted_by)
    SELECT r.kind, r.queue, r.args::jsonb, r.state, r.priority, 0, r.max_attempts,
           coalesce(r.run_at, now()), now(), 0, '[]', r.metadata::jsonb,
           CASE WHEN r.tags = '[]' THEN '{{}}'::text[]
                ELSE ARRAY(SELECT jsonb_array_elements_text(r.tags::jsonb)) END,
           '{{}}'
    FROM unnest(%(kinds)s::text[], %(queues)s::text[], %(args)s::text[], %(states)s::text[],
                %(priorities)s::int2[], %(max_attempts)s::int2[], %(run_ats)s::timestamptz[],
                %(metadata)s::text[], %(tags)s::text[])
         WITH ORDINALITY AS r(kind, queue, args, state, priority, max_attempts, run_at,
                               metadata, tags, ord)
    ORDER BY r.ord
    RETURNING id
)
SELECT id FROM inserted WHERE {_NOTIFY_ONCE} ORDER BY id
""",
)

# Params: queue, limit, worker_id, deadline_seconds (0 = no deadline).
# Index: awa_jobs_dispatch_idx (queue, priority, run_at, id) WHERE state='available'.
# Traps: (1) it must be a CTE: as a FROM sub-select the planner may merge it and lose the
# LIMIT under load; (2) the outer `state = 'available'` re-check is mandatory: a candidate
# seen before a concurrent claim committed must not be claimed twice (Awa bug #134);
# (3) the paused check reads awa_queue_state by primary key, once per statement.
# The lease rows are inserted in the same statement, so every running job has a lease.
job_claim_many = Statement(
    "job_claim_many",
    f"""
WITH candidates AS (
    SELECT id FROM awa_jobs_hot
    WHERE state = 'available' AND queue = %(queue)s AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM awa_queue_state qs
                      WHERE qs.queue = %(queue)s AND qs.paused)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE awa_jobs_hot j
    SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
        attempted_at = now(),
        attempted_by = (j.attempted_by || %(worker_id)s::varchar)[
            greatest(1, cardinality(j.attempted_by) - 8):]
    FROM candidates c
    WHERE j.id = c.id AND j.state = 'available'
    RETURNING {", ".join("j." + c for c in COLS.split(", "))}
), leased AS (
    INSERT INTO awa_active_leases (job_id, run_lease, queue, worker_id, claimed_at,
                                   heartbeat_at, deadline_at)
    SELECT id, run_lease, queue, %(worker_id)s, now(), now(),
           CASE WHEN %(deadline_seconds)s::float8 > 0
                THEN now() + make_interval(secs => %(deadline_seconds)s::float8) END
    FROM claimed
    ON CONFLICT (job_id) DO UPDATE
    SET run_lease = EXCLUDED.run_lease, worker_id = EXCLUDED.worker_id,
        claimed_at = EXCLUDED.claimed_at, heartbeat_at = EXCLUDED.heartbeat_at,
        deadline_at = EXCLUDED.deadline_at
)
SELECT {COLS} FROM claimed ORDER BY priority, run_at, id
""",
)

# Params: ids int8[], leases int8[], results (json text[], NULL elements for no result),
# both sorted by id so concurrent flushes lock rows in one order (no deadlocks).
# Guard: (id, state='running', run_lease) per row; RETURNING tells applied from stale.
# Index: primary key. The lease rows go in the same statement.
job_complete_many = Statement(
    "job_complete_many",
    f"""
WITH finished AS (
    UPDATE awa_jobs_hot j
    SET state = 'completed', finalized_at = now(), progress = NULL,
        result = t.result::jsonb
    FROM unnest(%(ids)s::int8[], %(leases)s::int8[], %(results)s::text[])
         AS t(id, run_lease, result)
    WHERE j.id = t.id AND j.run_lease = t.run_lease AND j.state = 'running'
    RETURNING {", ".join("j." + c for c in COLS.split(", "))}
), released AS (
    DELETE FROM awa_active_leases l USING finished f
    WHERE l.job_id = f.id AND l.run_lease = f.run_lease
)
SELECT {COLS} FROM finished
""",
)

# One guarded statement for every non-batched attempt outcome (retry, RetryAfter, snooze,
# cancel, fail, park). Params: id, run_lease, state (target), run_at_mode ('keep' |
# 'delay' | 'backoff'), delay_seconds, attempt_refund (1 for Snooze, else 0),
# finalize (bool: set finalized_at), error (text or NULL), terminal (bool),
# progress (json text or NULL: the attempt's latest snapshot), callback_id (park only:
# the token the handler returned must still be the job's current callback).
# Backoff is min(2^a + U[0,0.25)*2^a, 24 h) seconds on the database clock.
# Zero rows = stale outcome (rescued, cancelled or re-claimed): the caller drops it.
job_set_state_if_running = Statement(
    "job_set_state_if_running",
    f"""
WITH moved AS (
    UPDATE awa_jobs_hot
    SET state = %(state)s::text,
        run_at = CASE %(run_at_mode)s::text
            WHEN 'delay' THEN now() + make_interval(secs => greatest(%(delay_seconds)s::float8, 0))
            WHEN 'backoff' THEN now() + make_interval(
                secs => least(power(2, attempt) * (1 + random() * 0.25), 86400))
            ELSE run_at END,
        attempt = attempt - %(attempt_refund)s::int2,
        finalized_at = CASE WHEN %(finalize)s::bool THEN now() ELSE finalized_at END,
        errors = CASE WHEN %(error)s::text IS NULL THEN errors
            ELSE errors || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                'error', %(error)s::text, 'attempt', attempt, 'at', now(),
                'terminal', CASE WHEN %(terminal)s::bool THEN true END))) END,
        progress = CASE WHEN %(progress)s::text IS NULL THEN progress
                        ELSE %(progress)s::jsonb END,
        callback_id = CASE WHEN %(state)s::text = 'waiting_external' THEN callback_id END,
        callback_timeout_at = CASE WHEN %(state)s::text = 'waiting_external'
                                   THEN callback_timeout_at END
    WHERE id = %(id)s AND state = 'running' AND run_lease = %(run_lease)s
      AND (%(callback_id)s::uuid IS NULL OR callback_id = %(callback_id)s::uuid)
    RETURNING {COLS}
), released AS (
    DELETE FROM awa_active_leases l USING moved m
    WHERE l.job_id = m.id AND l.run_lease = m.run_lease
)
SELECT {COLS} FROM moved
""",
)

# Params: id, run_lease, progress (json text). Guarded like every attempt write.
job_progress_flush = Statement(
    "job_progress_flush",
    """
UPDATE awa_jobs_hot SET progress = %(progress)s::jsonb
WHERE id = %(id)s AND state = 'running' AND run_lease = %(run_lease)s
RETURNING id
""",
)

# Params: id. Reads one row by primary key (the executor re-reads after a stale park).
job_get = Statement("job_get", f"SELECT {COLS} FROM awa_jobs_hot WHERE id = %(id)s")

# Params: id, run_lease, callback_id (a fresh uuid4 from the worker), timeout_seconds.
# Re-registering replaces the token, so an older token can no longer resolve the job.
job_register_callback = Statement(
    "job_register_callback",
    """
UPDATE awa_jobs_hot
SET callback_id = %(callback_id)s::uuid,
    callback_timeout_at = now() + make_interval(secs => %(timeout_seconds)s::float8)
WHERE id = %(id)s AND state = 'running' AND run_lease = %(run_lease)s
RETURNING callback_id, callback_timeout_at
""",
)

# Params: id, run_lease, callback_id. Sequential wait (T11, wait mode): the handler keeps
# its slot and its lease; the lease's deadline is lifted because waiting is not running.
job_enter_wait = Statement(
    "job_enter_wait",
    """
WITH waiting AS (
    UPDATE awa_jobs_hot SET state = 'waiting_external'
    WHERE id = %(id)s AND state = 'running' AND run_lease = %(run_lease)s
      AND callback_id = %(callback_id)s::uuid
    RETURNING id, run_lease
), lifted AS (
    UPDATE awa_active_leases l SET deadline_at = NULL
    FROM waiting w WHERE l.job_id = w.id AND l.run_lease = w.run_lease
)
SELECT id FROM waiting
""",
)

# Params: id. What a sequential wait polls every 200 ms: a plain read (no lock, no
# transaction id, no write), so thousands of waiting handlers cost the wide row nothing.
# Returns (state, run_lease, has_payload).
job_wait_state = Statement(
    "job_wait_state",
    """
SELECT state, run_lease, metadata ? '_awa_callback_result'
FROM awa_jobs_hot WHERE id = %(id)s
""",
)

# Params: id, run_lease. Takes the payload resume_external left in metadata (removing
# it) once the job runs again under this attempt; returns it as JSON text, or no row.
job_take_callback_result = Statement(
    "job_take_callback_result",
    """
WITH current AS (
    SELECT id, metadata -> '_awa_callback_result' AS payload FROM awa_jobs_hot
    WHERE id = %(id)s AND state = 'running' AND run_lease = %(run_lease)s
      AND metadata ? '_awa_callback_result'
    FOR UPDATE
)
UPDATE awa_jobs_hot j SET metadata = j.metadata - '_awa_callback_result'
FROM current c WHERE j.id = c.id
RETURNING c.payload::text
""",
)
