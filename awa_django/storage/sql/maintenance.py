"""Statements the maintenance leader runs: promotion, rescue, pruning, leadership."""

from __future__ import annotations

from awa_django.channels import channel_sql
from awa_django.snapshot import RETURNING_COLUMNS as COLS
from awa_django.storage.sql import Statement

_J_COLS = ", ".join("j." + c for c in COLS.split(", "))

# Params: limit. Index: awa_jobs_promote_idx (run_at) WHERE state IN (scheduled, retryable).
# Trap: the states are literals, not parameters, so the partial index always matches
# (a parameterised state made Awa's promotion ~100x slower). Returns the distinct queues
# with counts, and wakes each queue's dispatchers once.
job_promote_due = Statement(
    "job_promote_due",
    f"""
WITH due AS (
    SELECT id FROM awa_jobs_hot
    WHERE state IN ('scheduled', 'retryable') AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE awa_jobs_hot j SET state = 'available', run_at = now()
    FROM due WHERE j.id = due.id AND j.state IN ('scheduled', 'retryable')
    RETURNING j.queue
)
SELECT queue, count(*), pg_notify({channel_sql("queue")}, '')::text
FROM promoted GROUP BY queue
""",
)

# Stale-heartbeat and deadline rescue share one shape. Params: limit, message, and
# staleness_seconds (heartbeat only). Index: awa_leases_heartbeat_idx /
# awa_leases_deadline_idx on the small lease table, then the job's primary key.
# Lock order: the job row first (FOR UPDATE OF j), then its lease — the order every other
# writer (completer, outcomes, cancel, callback resolution) uses, so rescue cannot
# deadlock with them. Guard: the job must still be running under that very lease.
# Rescue never fails a job; it applies backoff (decision 002). The awa_cancel hint lets
# the attempt's own worker, if alive, set its is_cancelled() flag.
_RESCUE = """
WITH stale AS (
    SELECT j.id, j.run_lease
    FROM awa_active_leases l
    JOIN awa_jobs_hot j ON j.id = l.job_id AND j.run_lease = l.run_lease
    WHERE {condition} AND j.state = 'running'
    ORDER BY l.job_id
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), rescued AS (
    UPDATE awa_jobs_hot j
    SET state = 'retryable', finalized_at = now(), callback_id = NULL,
        callback_timeout_at = NULL,
        run_at = now() + make_interval(
            secs => least(power(2, j.attempt) * (1 + random() * 0.25), 86400)),
        errors = j.errors || jsonb_build_array(jsonb_build_object(
            'error', %(message)s::text, 'attempt', j.attempt, 'at', now()))
    FROM stale s
    WHERE j.id = s.id AND j.run_lease = s.run_lease AND j.state = 'running'
    RETURNING {cols}
), released AS (
    DELETE FROM awa_active_leases l USING rescued r
    WHERE l.job_id = r.id AND l.run_lease = r.run_lease
)
SELECT {plain}, pg_notify('awa_cancel', json_build_object('job_id', id,
                                                          'run_lease', run_lease)::text)::text
FROM rescued
"""

job_rescue_stale_heartbeat = Statement(
    "job_rescue_stale_heartbeat",
    _RESCUE.format(
        condition="l.heartbeat_at < now() - make_interval(secs => %(staleness_seconds)s::float8)",
        cols=_J_COLS,
        plain=COLS,
    ),
)

job_rescue_deadline = Statement(
    "job_rescue_deadline",
    _RESCUE.format(condition="l.deadline_at < now()", cols=_J_COLS, plain=COLS),
)

# Params: limit. Index: awa_jobs_cb_timeout_idx (callback_timeout_at) WHERE
# state='waiting_external'. Exhausted jobs fail in place, others retry with backoff (T16).
job_rescue_expired_callback = Statement(
    "job_rescue_expired_callback",
    f"""
WITH expired AS (
    SELECT id FROM awa_jobs_hot
    WHERE state = 'waiting_external' AND callback_timeout_at < now()
    ORDER BY callback_timeout_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE awa_jobs_hot j
    SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END,
        finalized_at = now(), callback_id = NULL, callback_timeout_at = NULL,
        run_at = CASE WHEN j.attempt >= j.max_attempts THEN j.run_at
                      ELSE now() + make_interval(
                          secs => least(power(2, j.attempt) * (1 + random() * 0.25), 86400))
                 END,
        errors = j.errors || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'error', 'callback timed out', 'attempt', j.attempt, 'at', now(),
            'terminal', CASE WHEN j.attempt >= j.max_attempts THEN true END)))
    FROM expired e
    WHERE j.id = e.id AND j.state = 'waiting_external'
    RETURNING {_J_COLS}
), released AS (
    DELETE FROM awa_active_leases l USING rescued r WHERE l.job_id = r.id
)
SELECT {COLS} FROM rescued
""",
)

# Params: completed_seconds, failed_seconds, limit. Index: awa_jobs_finalized_idx
# (finalized_at) WHERE state IN terminal. Trap: the retention differs per state, so one
# `finalized_at < now() - CASE state ...` bound references the row itself and cannot be an
# index condition: the planner then reads every terminal row (a full scan per prune on a
# table that is mostly terminal rows). One branch per retention keeps each bound a plain
# index range. Small batches keep each delete short.
job_prune_terminal = Statement(
    "job_prune_terminal",
    """
WITH old_completed AS (
    SELECT id FROM awa_jobs_hot
    WHERE state = 'completed'
      AND finalized_at < now() - make_interval(secs => %(completed_seconds)s::float8)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), old_failed AS (
    SELECT id FROM awa_jobs_hot
    WHERE state IN ('failed', 'cancelled')
      AND finalized_at < now() - make_interval(secs => %(failed_seconds)s::float8)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), doomed AS (
    SELECT id FROM old_completed UNION ALL SELECT id FROM old_failed
    LIMIT %(limit)s
)
DELETE FROM awa_jobs_hot j USING doomed d WHERE j.id = d.id
""",
)

# Params: name, holder, ttl_seconds. Takes leadership when it is free or expired, or renews
# it when this holder has it; returns a row only when `holder` leads afterwards. The expiry
# is on the database clock, so worker clocks never matter.
leader_acquire_or_renew = Statement(
    "leader_acquire_or_renew",
    """
INSERT INTO awa_leader_lease (name, holder, acquired_at, expires_at)
VALUES (%(name)s, %(holder)s, now(), now() + make_interval(secs => %(ttl_seconds)s::float8))
ON CONFLICT (name) DO UPDATE
SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
    acquired_at = CASE WHEN awa_leader_lease.holder = EXCLUDED.holder
                       THEN awa_leader_lease.acquired_at ELSE now() END
WHERE awa_leader_lease.holder = EXCLUDED.holder OR awa_leader_lease.expires_at < now()
RETURNING holder, expires_at
""",
)

# Params: name, holder. Gives leadership up at shutdown so a peer takes over at once.
leader_release = Statement(
    "leader_release",
    "DELETE FROM awa_leader_lease WHERE name = %(name)s AND holder = %(holder)s",
)
