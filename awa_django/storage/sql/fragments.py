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


def append_error(errors: str, entry: str) -> str:
    """`errors` with `entry` (an `error_entry`) appended: every writer of an error entry
    goes through here, so the bound on the list is kept in one place."""
    return f"{errors} || {entry}"
