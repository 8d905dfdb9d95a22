"""Statements the maintenance leader runs: promotion, rescue, pruning, leadership."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from awa_django.channels import channel_sql
from awa_django.snapshot import JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement, dead_letters
from awa_django.storage.sql.fragments import (
    J_JOB_COLUMNS,
    append_error,
    error_entry,
    key_free,
    notify_cancel,
)
from awa_django.storage.sql.transitions import (
    CALLBACK_CLEARED,
    FAIL,
    PROMOTE,
    RETRY_LATER,
    chosen,
    dead_lettered_sql,
    exhausted_sql,
    update,
)

# Params: limit. Index: awa_jobs_promote_idx (run_at) WHERE state IN (scheduled, retryable).
# Trap: the states are literals, not parameters, so the partial index always matches
# (a parameterised state made Awa's promotion ~100x slower). Returns the distinct queues
# with counts, and wakes each queue's dispatchers once. A due job whose unique key another
# job holds is left scheduled until the key is free (fragments.key_free). A job that priority
# aging lifted before its attempt gets its enqueued priority back and ages anew (018).
JOB_PROMOTE_DUE = Statement(
    "job_promote_due",
    f"""
WITH due AS (
    SELECT id FROM awa_jobs_hot j
    WHERE {PROMOTE.guard()} AND run_at <= now() AND {key_free("j")}
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    {
        update(
            PROMOTE,
            source="due",
            where=f"j.id = due.id AND {PROMOTE.guard('j')}",
            returning="j.queue",
        )
    }
)
SELECT queue, count(*), pg_notify({channel_sql("queue")}, '')::text
FROM promoted GROUP BY queue
""",
)


def job_promote_due(*, limit: int) -> Query[int]:
    """How many jobs became available (at most `limit`)."""
    return Query(JOB_PROMOTE_DUE, {"limit": limit}, _promoted)


def _promoted(rows: query.Rows, count: int) -> int:
    return sum(row[1] for row in rows)  # one row per queue


# What every rescue does to the job it takes back: an attempt that was the job's last one
# ends `failed` (transitions.FAIL: attempts are a hard bound, decision 009); any other
# retries with backoff (transitions.RETRY_LATER, decision 002). The callback and any
# unread resume payload go with the attempt.
_EXHAUSTED = exhausted_sql("j")
_RESCUE_ENTRY = error_entry("%(message)s::text", "j.attempt", terminal=_EXHAUSTED)
_RESCUE_SET = chosen(
    _EXHAUSTED,
    FAIL,
    RETRY_LATER,
    *CALLBACK_CLEARED,
    ("errors", append_error("j.errors", _RESCUE_ENTRY)),
)

# A rescued job of a dead-letter queue whose last attempt it was moves to the dead letters
# in the same statement (decision 016): the rescue's UPDATE leaves such rows alone and a
# DELETE ... INSERT over the same locked candidates files them, each row touched by one
# of the two. Params (both): dead_letter_queues text[] (AwaSettings.dead_letter_queues).
_DEAD = f"{_EXHAUSTED} AND {dead_lettered_sql('j')}"


def _rescue_moves(candidates: str, guard: str, reason: str, *, attempt: bool) -> str:
    """The CTEs that rescue the locked rows of `candidates` (columns id, run_lease),
    re-checked with `guard` (over `j`, the job, and `c`, the candidate): `rescued` (FAIL
    or RETRY_LATER, chosen per row), `dead` and `entered` (the rows `_DEAD` selects,
    filed as dead letters with `reason`), and `released` (their leases: only the rescued
    attempt's when `attempt`)."""
    errors = append_error("errors", error_entry("%(message)s::text", "attempt", terminal="true"))
    columns, own = ("id, run_lease", " AND l.run_lease = r.run_lease") if attempt else ("id", "")
    return f"""rescued AS (
    UPDATE awa_jobs_hot j
    SET {_RESCUE_SET}
    FROM {candidates} c
    WHERE j.id = c.id AND {guard} AND NOT ({_DEAD})
    RETURNING {J_JOB_COLUMNS}
), dead AS (
    DELETE FROM awa_jobs_hot j USING {candidates} c
    WHERE j.id = c.id AND {guard} AND {_DEAD}
    RETURNING j.*
), entered AS ({dead_letters.enter("dead", errors=errors, progress="progress", reason=reason)}
), released AS (
    DELETE FROM awa_active_leases l
    USING (SELECT {columns} FROM rescued UNION ALL SELECT {columns} FROM dead) r
    WHERE l.job_id = r.id{own}
)"""


# Stale-heartbeat and deadline rescue share one shape. Params: limit, message,
# dead_letter_queues, and staleness_seconds (heartbeat only). Index:
# awa_leases_heartbeat_idx / awa_leases_deadline_idx on the small lease table, then the
# job's primary key.
# Lock order: the job row first (FOR UPDATE OF j), then its lease — the order every other
# writer (completer, outcomes, cancel, callback resolution) uses, so rescue cannot
# deadlock with them. Guard: the job must still be running under that very lease.
# The cancel hint lets the attempt's own worker, if alive, set its is_cancelled() flag.
# A job whose unique key another job holds is left for a later pass (fragments.key_free).
_RESCUE = f"""
WITH candidates AS (
    SELECT l.job_id AS id, l.run_lease FROM awa_active_leases l WHERE {{condition}}{{leaseless}}
), stale AS (
    SELECT j.id, j.run_lease
    FROM candidates c
    JOIN awa_jobs_hot j ON j.id = c.id AND j.run_lease = c.run_lease
    WHERE j.state = 'running' AND {key_free("j")}
    ORDER BY j.id
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), {
    _rescue_moves(
        "stale",
        "j.run_lease = c.run_lease AND j.state = 'running'",
        "'max_attempts_exhausted'",
        attempt=True,
    )
}
SELECT *, {notify_cancel("id", "run_lease")} FROM rescued
UNION ALL
SELECT {dead_letters.AS_FAILED_JOB}, {notify_cancel("m.id", "m.run_lease")}
FROM entered d JOIN dead m ON m.id = d.id
"""

_STALE = "now() - make_interval(secs => %(staleness_seconds)s::float8)"
# A running job whose attempt has no lease row yet (decision 030: the first heartbeat writes
# it, within one heartbeat interval) is stale once its claim is: its worker died before
# its first beat. Index: awa_jobs_state_id_part_idx ('running'), then the lease's key.
_LEASELESS = f"""
    UNION ALL
    SELECT j.id, j.run_lease FROM awa_jobs_hot j
    WHERE j.state = 'running' AND j.attempted_at < {_STALE}
      AND NOT EXISTS (SELECT 1 FROM awa_active_leases l
                      WHERE l.job_id = j.id AND l.run_lease = j.run_lease)"""
JOB_RESCUE_STALE_HEARTBEAT = Statement(
    "job_rescue_stale_heartbeat",
    _RESCUE.format(condition=f"l.heartbeat_at < {_STALE}", leaseless=_LEASELESS),
)


def job_rescue_stale_heartbeat(
    *,
    limit: int,
    staleness_seconds: float,
    message: str,
    dead_letter_queues: Sequence[str] = (),
) -> Query[list[JobSnapshot]]:
    """The rescued rows; a `failed` one of a `dead_letter_queues` queue was dead-lettered."""
    params = {
        "limit": limit,
        "staleness_seconds": staleness_seconds,
        "message": message,
        "dead_letter_queues": list(dead_letter_queues),
    }
    return Query(JOB_RESCUE_STALE_HEARTBEAT, params, query.jobs)


JOB_RESCUE_DEADLINE = Statement(
    "job_rescue_deadline", _RESCUE.format(condition="l.deadline_at < now()", leaseless="")
)


def job_rescue_deadline(
    *, limit: int, message: str, dead_letter_queues: Sequence[str] = ()
) -> Query[list[JobSnapshot]]:
    """As job_rescue_stale_heartbeat."""
    params = {"limit": limit, "message": message, "dead_letter_queues": list(dead_letter_queues)}
    return Query(JOB_RESCUE_DEADLINE, params, query.jobs)


# Params: limit, message, dead_letter_queues. Index: awa_jobs_cb_timeout_idx
# (callback_timeout_at) WHERE state='waiting_external'. Exhausted jobs fail in place (or,
# on a dead-letter queue, move to the dead letters as `callback_timeout`), others retry
# with backoff (T16). A parked job whose unique key a newer job holds stays parked until
# the key is free (fragments.key_free): with the default states, waiting_external holds no
# key.
JOB_RESCUE_EXPIRED_CALLBACK = Statement(
    "job_rescue_expired_callback",
    f"""
WITH expired AS (
    SELECT id FROM awa_jobs_hot j
    WHERE state = 'waiting_external' AND callback_timeout_at < now() AND {key_free("j")}
    ORDER BY callback_timeout_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {_rescue_moves("expired", "j.state = 'waiting_external'", "'callback_timeout'", attempt=False)}
SELECT * FROM rescued
UNION ALL
SELECT {dead_letters.AS_FAILED_JOB} FROM entered d JOIN dead m ON m.id = d.id
""",
)


def job_rescue_expired_callback(
    *, limit: int, message: str, dead_letter_queues: Sequence[str] = ()
) -> Query[list[JobSnapshot]]:
    """As job_rescue_stale_heartbeat."""
    params = {"limit": limit, "message": message, "dead_letter_queues": list(dead_letter_queues)}
    return Query(JOB_RESCUE_EXPIRED_CALLBACK, params, query.jobs)


# Params: completed_seconds, failed_seconds, limit. Index: awa_jobs_finalized_idx
# (finalized_at) WHERE state IN terminal. Trap: the retention differs per state, so one
# `finalized_at < now() - CASE state ...` bound references the row itself and cannot be an
# index condition: the planner then reads every terminal row (a full scan per prune on a
# table that is mostly terminal rows). One branch per retention keeps each bound a plain
# index range. Small batches keep each delete short.
# Workflows (decision 043): a parent stays while any child of it has not ended, so a child
# always reads its parents' results (JobContext.parent_results) and an operator sees the
# whole flow. A job outside any workflow (has_dependents false) never reaches the
# sub-select: PostgreSQL evaluates the cheap column test first.
KEEPS_PARENTS = """NOT (has_dependents AND EXISTS (
          SELECT 1 FROM awa_job_dependencies d JOIN awa_jobs_hot c ON c.id = d.child_id
          WHERE d.parent_id = awa_jobs_hot.id
            AND c.state NOT IN ('completed', 'failed', 'cancelled')))"""

JOB_PRUNE_TERMINAL = Statement(
    "job_prune_terminal",
    f"""
WITH old_completed AS (
    SELECT id FROM awa_jobs_hot
    WHERE state = 'completed'
      AND finalized_at < now() - make_interval(secs => %(completed_seconds)s::float8)
      AND {KEEPS_PARENTS}
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), old_failed AS (
    SELECT id FROM awa_jobs_hot
    WHERE state IN ('failed', 'cancelled')
      AND finalized_at < now() - make_interval(secs => %(failed_seconds)s::float8)
      AND {KEEPS_PARENTS}
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), doomed AS (
    SELECT id FROM old_completed UNION ALL SELECT id FROM old_failed
    LIMIT %(limit)s
)
DELETE FROM awa_jobs_hot j USING doomed d WHERE j.id = d.id
""",
    returns_rows=False,
)


def job_prune_terminal(
    *, completed_seconds: float, failed_seconds: float, limit: int
) -> Query[int]:
    """How many terminal rows were deleted."""
    params = {
        "completed_seconds": completed_seconds,
        "failed_seconds": failed_seconds,
        "limit": limit,
    }
    return Query(JOB_PRUNE_TERMINAL, params, query.rowcount)


# Params: name, holder, ttl_seconds. Takes leadership when it is free or expired, or renews
# it when this holder has it; returns a row only when `holder` leads afterwards. The expiry
# is on the database clock, so worker clocks never matter.
LEADER_ACQUIRE_OR_RENEW = Statement(
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


def leader_acquire_or_renew(*, name: str, holder: str, ttl_seconds: float) -> Query[bool]:
    """True when `holder` leads afterwards."""
    params = {"name": name, "holder": holder, "ttl_seconds": ttl_seconds}
    return Query(LEADER_ACQUIRE_OR_RENEW, params, query.matched)


# Params: name, holder. Gives leadership up at shutdown so a peer takes over at once.
LEADER_RELEASE = Statement(
    "leader_release",
    "DELETE FROM awa_leader_lease WHERE name = %(name)s AND holder = %(holder)s",
    returns_rows=False,
)


def leader_release(*, name: str, holder: str) -> Query[int]:
    return Query(LEADER_RELEASE, {"name": name, "holder": holder}, query.rowcount)


# Params: tables text[]. Reads the statistics collector (no table is touched). Returns,
# per queue table that autovacuum will not vacuum (autovacuum off for the server, or
# autovacuum_enabled=false on the table), its dead and live row estimates, and the oldest
# transaction still running in the cluster (what VACUUM could not look past just now).
TABLES_AUTOVACUUM_SKIPS = Statement(
    "tables_autovacuum_skips",
    """
SELECT s.relname::text, s.n_dead_tup, s.n_live_tup,
       pg_snapshot_xmin(pg_current_snapshot())::text::int8
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relname = ANY(%(tables)s::text[]) AND s.schemaname = current_schema()
  AND (current_setting('autovacuum') = 'off'
       OR 'autovacuum_enabled=false' = ANY(coalesce(c.reloptions, '{}')))
ORDER BY s.relname
""",
)


@dataclass(frozen=True, slots=True)
class TableDeadRows:
    table: str
    dead: int
    live: int
    oldest_xid: int  # the cluster's oldest running transaction when this was read


def tables_autovacuum_skips(*, tables: Sequence[str]) -> Query[list[TableDeadRows]]:
    return Query(TABLES_AUTOVACUUM_SKIPS, {"tables": list(tables)}, _dead_rows)


def _dead_rows(rows: query.Rows, count: int) -> list[TableDeadRows]:
    return [TableDeadRows(str(t), int(d), int(live), int(x)) for t, d, live, x in rows]
