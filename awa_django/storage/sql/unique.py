"""Statements of unique jobs on `awa_jobs_hot`: the bulk insert that skips rows whose key
is held, and the two lookups by key (who holds it; which live job to cancel).
`job_insert_one_unique` is in jobs.py, beside the insert it varies."""

from __future__ import annotations

from typing import Unpack

from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.arrays import bytea_array, text_array
from awa_django.storage.sql.fragments import NOTIFY_ONCE, UNIQUE_ARBITER
from awa_django.storage.sql.jobs import BulkColumns, bulk_insert_params


def _ids(rows: query.Rows, count: int) -> list[int | None]:
    return [row[0] for row in rows]


# job_insert_many's params plus unique_keys bytea[] and unique_states text[] (NULL
# elements for rows without a key). Returns one row per input, in input order: the new id,
# or NULL where a live job (or an earlier row of this call) held the key and the row was
# skipped. ON CONFLICT cannot RETURN the input position, so ids are drawn from the
# sequence first (in input order, as the plain insert's would be) and joined back.
# Index: awa_jobs_unique_idx, the arbiter; a holder not yet committed is waited for.
JOB_INSERT_MANY_UNIQUE = Statement(
    "job_insert_many_unique",
    f"""
WITH r AS MATERIALIZED (
    SELECT nextval('awa_jobs_hot_id_seq'::regclass) AS id, r.*
    FROM unnest(%(kinds)s::text[], %(queues)s::text[], %(args)s::text[], %(states)s::text[],
                %(priorities)s::int2[], %(max_attempts)s::int2[], %(run_ats)s::timestamptz[],
                %(metadata)s::text[], %(tags)s::text[], %(unique_keys)s::bytea[],
                %(unique_states)s::text[])
         WITH ORDINALITY AS r(kind, queue, args, state, priority, max_attempts, run_at,
                               metadata, tags, unique_key, unique_states, ord)
), inserted AS (
    INSERT INTO awa_jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts,
                              run_at, created_at, run_lease, errors, metadata, tags,
                              attempted_by, unique_key, unique_states)
    SELECT r.id, r.kind, r.queue, r.args::jsonb, r.state, r.priority, 0, r.max_attempts,
           coalesce(r.run_at, now()), now(), 0, '[]', r.metadata::jsonb,
           CASE WHEN r.tags = '[]' THEN '{{}}'::text[]
                ELSE ARRAY(SELECT jsonb_array_elements_text(r.tags::jsonb)) END,
           '{{}}', r.unique_key, r.unique_states
    FROM r
    ORDER BY r.ord
    ON CONFLICT {UNIQUE_ARBITER} DO NOTHING
    RETURNING id
)
SELECT i.id FROM r LEFT JOIN inserted i ON i.id = r.id WHERE {NOTIFY_ONCE} ORDER BY r.ord
""",
    prepared=True,
)


def job_insert_many_unique(
    *,
    unique_keys: list[bytes | None],
    unique_states: list[str | None],
    **columns: Unpack[BulkColumns],
) -> Query[list[int | None]]:
    """The bulk insert of rows some of which have a unique key: per input position, its
    new id or None (skipped: the key was held)."""
    params = {
        **bulk_insert_params(columns),
        "unique_keys": bytea_array(unique_keys),
        "unique_states": text_array(unique_states),
    }
    return Query(JOB_INSERT_MANY_UNIQUE, params, _ids)


# Params: unique_key. The job holding the key now (at most one: awa_jobs_unique_idx),
# what UniqueConflict reports. Index: awa_jobs_unique_idx (the predicate is repeated so
# the planner can prove the partial index applies).
JOB_UNIQUE_HOLDER = Statement(
    "job_unique_holder",
    """
SELECT id FROM awa_jobs_hot
WHERE unique_key = %(unique_key)s::bytea
  AND awa_state_in_unique_states(unique_states, state)
""",
)


def job_unique_holder(*, unique_key: bytes) -> Query[int | None]:
    """The id of the job holding `unique_key`, or None."""
    return Query(JOB_UNIQUE_HOLDER, {"unique_key": unique_key}, _first_id)


# Params: unique_key. cancel_by_unique_key's target: the oldest (lowest id) non-terminal
# job with the key, holding it or not (as Awa). Index: awa_jobs_unique_key_idx.
JOB_UNIQUE_OLDEST_LIVE = Statement(
    "job_unique_oldest_live",
    """
SELECT id FROM awa_jobs_hot
WHERE unique_key = %(unique_key)s::bytea
  AND state NOT IN ('completed', 'failed', 'cancelled')
ORDER BY id
LIMIT 1
""",
)


def job_unique_oldest_live(*, unique_key: bytes) -> Query[int | None]:
    return Query(JOB_UNIQUE_OLDEST_LIVE, {"unique_key": unique_key}, _first_id)


def _first_id(rows: query.Rows, count: int) -> int | None:
    return rows[0][0] if rows else None
