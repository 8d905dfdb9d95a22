"""SQL fragments shared by several statements, written once."""

from __future__ import annotations

from awa_django.channels import CANCEL_CHANNEL
from awa_django.snapshot import COLUMNS, JSON_COLUMNS

# The column list every statement that returns a whole job row uses, in JobSnapshot order.
# jsonb columns come back as text on both sides: Django's connection returns jsonb as text
# anyway, while the runtime's psycopg would decode it, and a decoded JSON string (a task
# result "ok", metadata "x") would then be indistinguishable from undecoded text.
JOB_COLUMNS = ", ".join(
    f"{name}::text AS {name}" if name in JSON_COLUMNS else name for name in COLUMNS
)
# The bare names, to select from a CTE whose RETURNING already cast and named them.
JOB_COLUMN_NAMES = ", ".join(COLUMNS)
# The same columns qualified by the alias `j`, for UPDATE ... FROM ... RETURNING.
J_JOB_COLUMNS = ", ".join(
    f"j.{name}::text AS {name}" if name in JSON_COLUMNS else f"j.{name}" for name in COLUMNS
)

# The session setting that holds a runtime connection's lease epoch (decision 029): set
# when the connection opens (leases.lease_epoch_take), read by the claim, which then hands
# out run_leases no lost claim can have handed out and commits without the flush wait.
LEASE_EPOCH_SETTING = "awa.lease_epoch"
# Claims under epoch e hand out run_leases from e * EPOCH_SPACE up: below the next epoch's
# base unless one job is claimed 2**24 times on one connection, which lives an hour at most
# (the pool's max_lifetime). Run_leases below EPOCH_SPACE were counted on by durable claims.
# 2**24 rather than 2**32 keeps run_leases exact as JSON doubles (below 2**53) for the
# first 2**29 epochs. LAST_EPOCH keeps epoch * EPOCH_SPACE inside int8.
EPOCH_SPACE = 1 << 24
LAST_EPOCH = (1 << 31) - 2

# Wake-up hints ride on the statement that makes jobs available, so enqueue stays one round
# trip: the uncorrelated sub-select runs once per statement (an InitPlan), never per row.
# Params: channels text[] (empty for jobs that are not available yet). NOTIFY is delivered
# only when the enclosing transaction commits, so listeners never see an uncommitted job.
NOTIFY_ONCE = "(SELECT count(pg_notify(ch, '')) FROM unnest(%(channels)s::text[]) ch) >= 0"

# The partial unique index of unique jobs, named for ON CONFLICT by its column and its
# predicate (PostgreSQL infers the arbiter index from both; models.UNIQUE_HOLDS_KEY is the
# same predicate on the model's Meta). Migration 0004 creates the function.
UNIQUE_ARBITER = "(unique_key) WHERE awa_state_in_unique_states(unique_states, state)"


def key_free(job: str) -> str:
    """True unless another job holds the unique key of the row aliased `job`. The batched
    maintenance moves (promotion, rescues) take only such rows: moving a row into its
    unique states while a newer job holds its key would fail the whole batch, every pass.
    A row whose key is held waits where it is until the key is free (decision 012).
    Rows without a key stop at the first test, so other jobs pay nothing."""
    return f"""({job}.unique_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM awa_jobs_hot holder
        WHERE holder.unique_key = {job}.unique_key AND holder.id <> {job}.id
          AND awa_state_in_unique_states(holder.unique_states, holder.state)))"""


def backoff(attempt: str) -> str:
    """Retry delay in seconds after `attempt` (a column or expression): min(2^a + U[0,
    0.25)·2^a, 24 h) on the database clock (DESIGN §5)."""
    return f"least(power(2, {attempt}) * (1 + random() * 0.25), 86400)"


def notify_cancel(job_id: str, run_lease: str) -> str:
    """Tells the attempt's worker (if alive) to set its `is_cancelled()` flag."""
    return (
        f"pg_notify('{CANCEL_CHANNEL}', json_build_object('job_id', {job_id}, "
        f"'run_lease', {run_lease})::text)::text"
    )


def error_entry(error: str, attempt: str, *, terminal: str = "NULL", kind: str = "NULL") -> str:
    """One `errors` entry, {error, type?, attempt, at, terminal?}, as a one-element array to
    append; `type` (the exception class path) and `terminal` are left out when NULL/false."""
    return (
        f"jsonb_build_array(jsonb_strip_nulls(jsonb_build_object('error', {error}, "
        f"'type', {kind}, 'attempt', {attempt}, 'at', now(), "
        f"'terminal', CASE WHEN {terminal} THEN true END)))"
    )


# `errors` keeps at most this many entries: the first (how it started), a marker counting
# the ones dropped, and the most recent. A job retried for weeks stays one small row.
ERRORS_KEPT = 20
_RECENT = ERRORS_KEPT - 3  # besides the first, the marker and the entry being appended


def append_error(errors: str, entry: str) -> str:
    """`errors` with `entry` (an `error_entry`) appended, capped at ERRORS_KEPT: every
    writer of an error entry goes through here, so the bound is kept in one place."""
    return f"""CASE WHEN jsonb_array_length({errors}) < {ERRORS_KEPT} THEN {errors} || {entry}
    ELSE jsonb_build_array({errors} -> 0) || (
        SELECT jsonb_build_array(jsonb_build_object(
                   'error', format('%%s earlier error entries omitted', s.n), 'omitted', s.n))
               || s.recent
        FROM (SELECT coalesce(({errors} -> 1 ->> 'omitted')::int, 0)
                     + count(*) FILTER (WHERE t.i <= jsonb_array_length({errors}) - {_RECENT})
                     AS n,
                     coalesce(jsonb_agg(t.x ORDER BY t.i) FILTER (
                         WHERE t.i > jsonb_array_length({errors}) - {_RECENT}), '[]') AS recent
              FROM jsonb_array_elements({errors}) WITH ORDINALITY t(x, i)
              WHERE t.i > CASE WHEN {errors} -> 1 ? 'omitted' THEN 2 ELSE 1 END) s
    ) || {entry} END"""


def attempt_owned(alias: str = "") -> str:
    """The guard of every write by the attempt that ran the job (params id, run_lease): the
    job still runs under that attempt's run_lease; otherwise the write is stale (rescued,
    cancelled, resolved or claimed again meanwhile) and matches no row."""
    column = f"{alias}." if alias else ""
    return (
        f"{column}id = %(id)s AND {column}state = 'running' AND {column}run_lease = %(run_lease)s"
    )


# The progress an attempt's outcome leaves: its latest snapshot (param progress, json text)
# or, without one, the stored progress.
ATTEMPT_PROGRESS = "coalesce(%(progress)s::jsonb, progress)"

# The `errors` an attempt's outcome leaves: its entry appended when it has an error (params
# error text or NULL, error_type, terminal), as job_set_state_if_running (every
# move) and its dead-letter twin (dead_letters.job_dead_letter_if_running) write it.
ATTEMPT_ERRORS = f"""CASE WHEN %(error)s::text IS NULL THEN errors
            ELSE {
    append_error(
        "errors",
        error_entry(
            "%(error)s::text",
            "attempt",
            terminal="%(terminal)s::bool",
            kind="%(error_type)s::text",
        ),
    )
} END"""
