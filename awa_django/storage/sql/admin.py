"""Statements behind the Client's operator actions (cancel, retry)."""

from __future__ import annotations

from awa_django.channels import channel_sql
from awa_django.snapshot import RETURNING_COLUMNS as COLS
from awa_django.storage.sql import Statement

_J_COLS = ", ".join("j." + c for c in COLS.split(", "))

# Params: ids int8[]. T19: any non-terminal job → cancelled. Rows are locked in id order.
# A running attempt's later outcome is stale from here on, and its worker hears
# awa_cancel, inside this transaction, to set is_cancelled(). The leases are deleted by
# leases.lease_delete_for_jobs, run next in the same transaction: a DELETE in this
# statement would use its snapshot and miss a lease that a claim or resume_external,
# whose row lock this statement waited for, committed meanwhile.
job_cancel_many = Statement(
    "job_cancel_many",
    f"""
WITH target AS (
    SELECT id, state AS prior_state FROM awa_jobs_hot
    WHERE id = ANY(%(ids)s::int8[])
      AND state NOT IN ('completed', 'failed', 'cancelled')
    ORDER BY id
    FOR UPDATE
), cancelled AS (
    UPDATE awa_jobs_hot j
    SET state = 'cancelled', finalized_at = now(), callback_id = NULL,
        callback_timeout_at = NULL
    FROM target t WHERE j.id = t.id
    RETURNING {_J_COLS}, t.prior_state
)
SELECT {COLS}, CASE WHEN prior_state IN ('running', 'waiting_external') THEN
    pg_notify('awa_cancel', json_build_object('job_id', id, 'run_lease', run_lease)::text)::text
    END
FROM cancelled
""",
)

# Params: ids int8[]. Each retried job's queue is notified (duplicates fold into one). T21:
# failed / cancelled / waiting_external → available, attempt reset, errors and run_lease kept.
job_retry_many = Statement(
    "job_retry_many",
    f"""
WITH target AS (
    SELECT id FROM awa_jobs_hot
    WHERE id = ANY(%(ids)s::int8[])
      AND state IN ('failed', 'cancelled', 'waiting_external')
    ORDER BY id
    FOR UPDATE
), retried AS (
    UPDATE awa_jobs_hot j
    SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL
    FROM target t WHERE j.id = t.id
    RETURNING {_J_COLS}
), released AS (
    DELETE FROM awa_active_leases l USING retried r WHERE l.job_id = r.id
)
SELECT {COLS}, pg_notify({channel_sql("queue")}, '')::text FROM retried
""",
)
