"""Statements behind the Client's operator actions (cancel, retry)."""

from __future__ import annotations

from awa_django.snapshot import JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.fragments import J_JOB_COLUMNS, JOB_COLUMN_NAMES
from awa_django.storage.sql.transitions import (
    CANCEL,
    OPERATOR_RETRY,
    Move,
    operator_retry_after,
    update,
)


def _by_ids(move: Move, *, leases: str, named: str = "") -> str:
    """`move` applied to the jobs of `ids` it may start from, locked in id order (one lock
    order for every writer); returns each moved row and its NOTIFY. `leases`: the CTE that
    releases them, or "" when the caller releases them in a statement of its own. `named`:
    a CTE that names the target rows for the move's own expressions."""
    returning = f"{J_JOB_COLUMNS}, t.prior_state"
    return f"""
WITH target AS (
    SELECT id, state AS prior_state FROM awa_jobs_hot
    WHERE id = ANY(%(ids)s::int8[])
      AND {move.guard()}
    ORDER BY id
    FOR UPDATE
){named}, moved AS (
    {update(move, source="target t", where="j.id = t.id", returning=returning)}
){leases}
SELECT {JOB_COLUMN_NAMES}, {move.notify_row()}
FROM moved
"""


# Params: ids int8[]. T19 (transitions.CANCEL). A running attempt's later outcome is stale
# from here on, and its worker hears the cancel hint, inside this transaction, to set
# is_cancelled(). The leases are deleted by leases.lease_delete_for_jobs, run next in the
# same transaction: a DELETE in this statement would use its snapshot and miss a lease
# that a claim or resume_external, whose row lock this statement waited for, committed
# meanwhile.
JOB_CANCEL_MANY = Statement("job_cancel_many", _by_ids(CANCEL, leases=""))


def job_cancel_many(*, ids: list[int]) -> Query[list[JobSnapshot]]:
    """The rows this statement cancelled (ids sorted: one lock order for every writer)."""
    return Query(JOB_CANCEL_MANY, {"ids": ids}, query.jobs)


# Params: ids int8[]. T21 (transitions.OPERATOR_RETRY). Each retried job's queue is
# notified (duplicates fold into one).
JOB_RETRY_MANY = Statement(
    "job_retry_many",
    _by_ids(
        OPERATOR_RETRY,
        leases=f", {operator_retry_after('moved')}",
        named=", retrying AS (SELECT id FROM target)",
    ),
)


def job_retry_many(*, ids: list[int]) -> Query[list[JobSnapshot]]:
    return Query(JOB_RETRY_MANY, {"ids": ids}, query.jobs)
