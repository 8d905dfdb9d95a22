"""Statements of bulk operations (`Client.bulk_*`): one chunk each, over a keyset window of
job ids, and the pruning of finished operations (decision 018).

Every chunk statement has the same shape. `win` reads the next `limit` ids after the cursor
that match the filter (no lock: a plain index read); `target` locks those rows again with
the filter re-checked on their latest version, skipping rows a worker holds at that moment
(SKIP LOCKED: a chunk never waits for a claim or a completion, and never blocks one); the
action runs on `target`. The statement returns the window's last id (the next cursor) and
size, and what the action did. A window shorter than `limit` is the last one.

Filter params (every statement): queue, kind (NULL: any), states text[] (the action's
states under the filter), tags text[] (NULL: any; else all of them), created_after,
created_before, finalized_after, finalized_before (NULL: unbounded), after (the cursor), limit.
Django binds parameters on the client side, so `NULL IS NULL` folds away at plan time and
each chunk is planned for the filter it has. Index: awa_jobs_state_id_part_idx (state, id),
read from the cursor when the states are few (retry_failed, discard_failed); otherwise the
primary key, or awa_jobs_kind_state_idx / the queue and tags indexes where the filter is
selective (checked with EXPLAIN in the tests).

The queue and tags indexes are partial (decision 028), so the filter names their
predicates, as storage.models' `in_queue()` and `has_tag()` do: a queue's `available` jobs
are found through the dispatch index, its others through awa_jobs_queue_state_part_idx
(`state <> 'available'`); tags through awa_jobs_tags_part_idx (`NOT tags = '{}'`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from awa_django.bulk import JobFilter
from awa_django.channels import channel_sql
from awa_django.snapshot import JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.fragments import J_JOB_COLUMNS, JOB_COLUMN_NAMES, key_free
from awa_django.storage.sql.transitions import (
    CANCEL,
    OPERATOR_RETRY,
    operator_retry_after,
    update,
)

_FILTER = """(%(queue)s::text IS NULL OR j.queue = %(queue)s::text
           AND (j.state = 'available' OR j.state <> 'available'))
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND j.state = ANY(%(states)s::text[])
      AND (%(tags)s::varchar[] IS NULL OR j.tags @> %(tags)s::varchar[] AND NOT j.tags = '{}')
      AND (%(created_after)s::timestamptz IS NULL OR j.created_at >= %(created_after)s)
      AND (%(created_before)s::timestamptz IS NULL OR j.created_at < %(created_before)s)
      AND (%(finalized_after)s::timestamptz IS NULL
           OR j.finalized_at >= %(finalized_after)s)
      AND (%(finalized_before)s::timestamptz IS NULL
           OR j.finalized_at < %(finalized_before)s)"""

_WINDOW = f"""
win AS (
    SELECT j.id FROM awa_jobs_hot j
    WHERE j.id > %(after)s AND {_FILTER}
    ORDER BY j.id
    LIMIT %(limit)s
), seen AS (
    SELECT max(id) AS last_id, count(*) AS matched FROM win
), target AS (
    SELECT j.id, j.state AS prior_state FROM awa_jobs_hot j
    WHERE j.id IN (SELECT id FROM win) AND {_FILTER}
    ORDER BY j.id
    FOR UPDATE SKIP LOCKED
)"""


@dataclass(frozen=True, slots=True)
class Window:
    """The rows one chunk looks at: the next `limit` ids after `after` that match `where`
    in `states` (the action's states under the filter)."""

    where: JobFilter
    states: tuple[str, ...]
    after: int
    limit: int


@dataclass(frozen=True, slots=True)
class ChunkOutcome:
    last_id: int | None  # None: the window was empty, the operation is complete
    matched: int  # rows in the window
    done: int  # rows the action changed
    conflicts: int = 0  # retry: rows left failed because their unique key is held
    cancelled: tuple[JobSnapshot, ...] = ()  # cancel: the rows, for the Cancelled events


def _aggregates(rows: query.Rows, count: int) -> ChunkOutcome:
    last_id, matched, done, conflicts = rows[0][:4]
    return ChunkOutcome(last_id, matched, done, conflicts)


def _cancelled(rows: query.Rows, count: int) -> ChunkOutcome:
    jobs = tuple(JobSnapshot.from_row(row[2:]) for row in rows if row[2] is not None)
    return ChunkOutcome(rows[0][0], rows[0][1], len(jobs), 0, jobs)


def _params(window: Window) -> dict[str, Any]:
    where = window.where
    return {
        "queue": where.queue,
        "kind": where.kind,
        "states": list(window.states),
        "tags": list(where.tags) or None,
        "created_after": where.created_after,
        "created_before": where.created_before,
        "finalized_after": where.finalized_after,
        "finalized_before": where.finalized_before,
        "after": window.after,
        "limit": window.limit,
    }


# T19 in bulk (transitions.CANCEL), as job_cancel_many: running and parked attempts hear
# the cancel hint and their later outcome is stale; their leases go in
# lease_delete_for_jobs, next in the chunk's transaction. Returns one row per cancelled
# job (at least one row: the window).
_CANCELLED_ROWS = f"{J_JOB_COLUMNS}, t.prior_state"
JOB_BULK_CANCEL = Statement(
    "job_bulk_cancel",
    f"""
WITH {_WINDOW}, cancelled AS (
    {update(CANCEL, source="target t", where="j.id = t.id", returning=_CANCELLED_ROWS)}
)
SELECT last_id, matched, {JOB_COLUMN_NAMES}, {CANCEL.notify_row()}
FROM seen LEFT JOIN cancelled ON true
""",
)


def job_bulk_cancel(*, window: Window) -> Query[ChunkOutcome]:
    return Query(JOB_BULK_CANCEL, _params(window), _cancelled)


# T21 in bulk (transitions.OPERATOR_RETRY), as job_retry_many. Extra param: skip_keyed
# bool. A row whose unique key another live job holds stays failed and counts as a
# conflict (fragments.key_free), as does every row of a key but the oldest in the window.
# A concurrent enqueue can still take a key between the check and the update: the Client
# then runs the chunk again with skip_keyed, leaving every keyed row of it (conflicts).
JOB_BULK_RETRY = Statement(
    "job_bulk_retry",
    f"""
WITH {_WINDOW}, ranked AS (
    SELECT j.id, j.unique_key IS NULL OR (NOT %(skip_keyed)s AND {key_free("j")}
        AND row_number() OVER (PARTITION BY j.unique_key ORDER BY j.id) = 1) AS free
    FROM awa_jobs_hot j JOIN target t ON t.id = j.id
), retrying AS (
    SELECT id FROM ranked WHERE free
), retried AS (
    {
        update(
            OPERATOR_RETRY,
            source="ranked r",
            where="j.id = r.id AND r.free",
            returning="j.id, j.queue",
        )
    }
), {operator_retry_after("retried", "r")}
SELECT last_id, matched, (SELECT count(*) FROM retried),
       (SELECT count(*) FROM ranked WHERE NOT free),
       (SELECT count(pg_notify(ch, '')) FROM (
            SELECT DISTINCT {channel_sql("queue")} AS ch FROM retried) q)
FROM seen
""",
)


def job_bulk_retry(*, window: Window, skip_keyed: bool) -> Query[ChunkOutcome]:
    params = {**_params(window), "skip_keyed": skip_keyed}
    return Query(JOB_BULK_RETRY, params, _aggregates)


# Extra param: priority. An operator's priority replaces an aged one (original cleared).
JOB_BULK_SET_PRIORITY = Statement(
    "job_bulk_set_priority",
    f"""
WITH {_WINDOW}, changed AS (
    UPDATE awa_jobs_hot j SET priority = %(priority)s, original_priority = NULL
    FROM target t WHERE j.id = t.id
    RETURNING j.id
)
SELECT last_id, matched, (SELECT count(*) FROM changed), 0 FROM seen
""",
)


def job_bulk_set_priority(*, window: Window, priority: int) -> Query[ChunkOutcome]:
    params = {**_params(window), "priority": priority}
    return Query(JOB_BULK_SET_PRIORITY, params, _aggregates)


# Extra param: target_queue. Jobs keep their unique key (computed at enqueue, decision 012):
# moving does not re-key them. The destination queue is woken once if a job became
# available there.
JOB_BULK_MOVE_QUEUE = Statement(
    "job_bulk_move_queue",
    f"""
WITH {_WINDOW}, changed AS (
    UPDATE awa_jobs_hot j SET queue = %(target_queue)s
    FROM target t WHERE j.id = t.id
    RETURNING j.id, j.state
)
SELECT last_id, matched, (SELECT count(*) FROM changed), 0,
       (SELECT count(pg_notify({channel_sql("%(target_queue)s::text")}, ''))
        FROM (SELECT 1 FROM changed WHERE state = 'available' LIMIT 1) a)
FROM seen
""",
)


def job_bulk_move_queue(*, window: Window, target_queue: str) -> Query[ChunkOutcome]:
    params = {**_params(window), "target_queue": target_queue}
    return Query(JOB_BULK_MOVE_QUEUE, params, _aggregates)


# discard_failed: deletes failed rows (states is always {failed}; no lease exists for them).
JOB_BULK_DISCARD = Statement(
    "job_bulk_discard",
    f"""
WITH {_WINDOW}, deleted AS (
    DELETE FROM awa_jobs_hot j USING target t
    WHERE j.id = t.id AND j.state = 'failed'
    RETURNING j.id
)
SELECT last_id, matched, (SELECT count(*) FROM deleted), 0 FROM seen
""",
)


def job_bulk_discard(*, window: Window) -> Query[ChunkOutcome]:
    return Query(JOB_BULK_DISCARD, _params(window), _aggregates)


# Params: older_than_seconds, limit. Finished operations past retention; the table is small
# (one row per operation), so the primary key scan is enough.
BULK_OPERATION_PRUNE = Statement(
    "bulk_operation_prune",
    """
DELETE FROM awa_bulk_operations WHERE id IN (
    SELECT id FROM awa_bulk_operations
    WHERE state = 'completed'
      AND finished_at < now() - make_interval(secs => %(older_than_seconds)s::float8)
    ORDER BY id LIMIT %(limit)s)
""",
    returns_rows=False,
)


def bulk_operation_prune(*, older_than_seconds: float, limit: int) -> Query[int]:
    params = {"older_than_seconds": older_than_seconds, "limit": limit}
    return Query(BULK_OPERATION_PRUNE, params, query.rowcount)


# Params: the filter's (after = 0, limit unused). The count a bulk operation starts from
# and a dry run reports: the same filter text as the chunks, so they cannot disagree.
JOB_BULK_COUNT = Statement(
    "job_bulk_count",
    f"SELECT count(*) FROM awa_jobs_hot j WHERE {_FILTER}",
)


def job_bulk_count(*, where: JobFilter, states: tuple[str, ...]) -> Query[int]:
    return Query(JOB_BULK_COUNT, _params(Window(where, states, 0, 0)), _count)


def _count(rows: query.Rows, count: int) -> int:
    return int(rows[0][0])
