"""Statements behind the Client's operator actions (cancel, retry)."""

from __future__ import annotations

from awa_django.channels import channel_sql
from awa_django.snapshot import JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.fragments import J_JOB_COLUMNS, JOB_COLUMN_NAMES, notify_cancel

# Params: ids int8[]. T19: any non-terminal job → cancelled. Rows are locked in id order.
# A running attempt's later outcome is stale from here on, and its worker hears the
# cancel hint, inside this transaction, to set is_cancelled(). The leases are deleted by
# leases.lease_delete_for_jobs, run next in the same transaction: a DELETE in this
# statement would use its snapshot and miss a lease that a claim or resume_external,
# whose row lock this statement waited for, committed meanwhile.
JOB_CANCEL_MANY = Statement(
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
        callback_timeout_at = NULL, callback_result = NULL
    FROM target t WHERE j.id = t.id
    RETURNING {J_JOB_COLUMNS}, t.prior_state
)
SELECT {JOB_COLUMN_NAMES}, CASE WHEN prior_state IN ('running', 'waiting_external')
    THEN {notify_cancel("id", "run_lease")} END
FROM cancelled
""",
)


def job_cancel_many(*, ids: list[int]) -> Query[list[JobSnapshot]]:
    """The rows this statement cancelled (ids sorted: one lock order for every writer)."""
    return Query(JOB_CANCEL_MANY, {"ids": ids}, query.jobs)


# Params: ids int8[]. Each retried job's queue is notified (duplicates fold into one). T21:
# failed / cancelled / waiting_external → available, attempt reset, errors and run_lease kept,
# the enqueued priority restored if aging had lifted it (decision 018). Beyond Awa's T21, a
# retryable job is taken too: an operator's retry runs it now instead of after its backoff.
JOB_RETRY_MANY = Statement(
    "job_retry_many",
    f"""
WITH target AS (
    SELECT id FROM awa_jobs_hot
    WHERE id = ANY(%(ids)s::int8[])
      AND state IN ('failed', 'cancelled', 'waiting_external', 'retryable')
    ORDER BY id
    FOR UPDATE
), retried AS (
    UPDATE awa_jobs_hot j
    SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL, callback_result = NULL,
        priority = coalesce(j.original_priority, j.priority), original_priority = NULL
    FROM target t WHERE j.id = t.id
    RETURNING {J_JOB_COLUMNS}
), released AS (
    DELETE FROM awa_active_leases l USING retried r WHERE l.job_id = r.id
)
SELECT *, pg_notify({channel_sql("queue")}, '')::text FROM retried
""",
)


def job_retry_many(*, ids: list[int]) -> Query[list[JobSnapshot]]:
    return Query(JOB_RETRY_MANY, {"ids": ids}, query.jobs)
