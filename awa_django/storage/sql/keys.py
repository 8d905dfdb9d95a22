"""Statements of per-key concurrency (decision 045) outside the triggers of migration 0014:
the leader's sweep of jobs waiting for a slot, and the busiest keys operators read."""

from __future__ import annotations

from awa_django.channels import channel_sql
from awa_django.snapshot import KeyFigures
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement

# Params: limit. Run by the promoter each tick. The head of each key's waiting line (in
# dispatch order) whose key has room, i.e. a slot row below its max that is free, or fewer
# slot rows than its max, and no slot at or above its max still held (a lowered max: the
# admission would refuse it, so moving it would only rewrite the row), is moved to
# `available`, which runs the admission trigger: it takes the slot or goes back to
# waiting_slot (a free slot another transaction holds locked). Why a sweep at all, when
# every release hands its slot to the next waiting job: admission never waits on a lock
# (SKIP LOCKED), so a job enqueued while a release of its key is still uncommitted can
# miss that hand-off; and a raised max_in_flight has room no release hands over. Index:
# awa_jobs_waiting_slot_idx (concurrency_key, priority, run_at, id) WHERE state =
# 'waiting_slot', read in order, so DISTINCT ON takes each key's first entry; keys
# without room cost a probe or two of awa_key_slots' primary key.
JOB_ADMIT_WAITING = Statement(
    "job_admit_waiting",
    f"""
WITH heads AS (
    SELECT DISTINCT ON (concurrency_key) id, concurrency_key, kind,
           metadata -> '_awa_concurrency' AS spec
    FROM awa_jobs_hot
    WHERE state = 'waiting_slot'
    ORDER BY concurrency_key, priority, run_at, id
), roomy AS (
    SELECT h.id FROM heads h, LATERAL (SELECT awa_key_max(h.kind, h.spec) AS max) m
    WHERE (EXISTS (SELECT 1 FROM awa_key_slots s
                   WHERE s.key_digest = h.concurrency_key AND s.slot < m.max
                     AND s.job_id IS NULL)
           OR (SELECT count(*) FROM awa_key_slots s
               WHERE s.key_digest = h.concurrency_key AND s.slot < m.max) < m.max)
      AND NOT EXISTS (SELECT 1 FROM awa_key_slots s
                      WHERE s.key_digest = h.concurrency_key AND s.slot >= m.max
                        AND s.job_id IS NOT NULL)
    LIMIT %(limit)s
), moved AS (
    UPDATE awa_jobs_hot j SET state = 'available'
    FROM roomy r WHERE j.id = r.id AND j.state = 'waiting_slot'
    RETURNING j.state, j.queue
)
SELECT queue, count(*), pg_notify({channel_sql("queue")}, '')::text
FROM moved WHERE state = 'available' GROUP BY queue
""",
)


def job_admit_waiting(*, limit: int) -> Query[int]:
    """How many waiting jobs the sweep admitted (at most `limit` keys looked at)."""
    return Query(JOB_ADMIT_WAITING, {"limit": limit}, _admitted)


def _admitted(rows: query.Rows, count: int) -> int:
    return sum(row[1] for row in rows)


# Params: limit. The busiest keys: those with the most jobs holding a slot or waiting for
# one. Reads awa_key_slots (held slots only) and awa_jobs_waiting_slot_idx; idle keys (no
# held slot, nobody waiting) are not listed. Not on the hot path: awa_status, the admin.
KEY_BUSIEST = Statement(
    "key_busiest",
    """
WITH held AS (
    SELECT key_digest, count(*) AS in_flight FROM awa_key_slots
    WHERE job_id IS NOT NULL GROUP BY key_digest
), waiting AS (
    SELECT concurrency_key AS key_digest, count(*) AS waiting FROM awa_jobs_hot
    WHERE state = 'waiting_slot' GROUP BY concurrency_key
)
SELECT coalesce((SELECT s.key_text FROM awa_key_slots s
                 WHERE s.key_digest = k.key_digest AND s.slot = 0), ''),
       coalesce(h.in_flight, 0), coalesce(w.waiting, 0)
FROM (SELECT key_digest FROM held UNION SELECT key_digest FROM waiting) k
LEFT JOIN held h USING (key_digest) LEFT JOIN waiting w USING (key_digest)
ORDER BY coalesce(h.in_flight, 0) + coalesce(w.waiting, 0) DESC, 1
LIMIT %(limit)s
""",
)


def key_busiest(*, limit: int) -> Query[list[KeyFigures]]:
    """The `limit` busiest keys, busiest first."""
    return Query(KEY_BUSIEST, {"limit": limit}, _figures)


def _figures(rows: query.Rows, count: int) -> list[KeyFigures]:
    return [KeyFigures(key, in_flight, waiting) for key, in_flight, waiting in rows]


# Params: none. Jobs waiting for a slot, per queue: the `awa_keys_waiting` gauge. Index:
# awa_jobs_waiting_slot_idx (the partial index holds exactly these rows).
KEY_WAITING_BY_QUEUE = Statement(
    "key_waiting_by_queue",
    "SELECT queue, count(*) FROM awa_jobs_hot WHERE state = 'waiting_slot' GROUP BY queue",
)


def key_waiting_by_queue() -> Query[dict[str, int]]:
    """{queue: jobs waiting for a slot}; queues with none are absent."""
    return Query(KEY_WAITING_BY_QUEUE, {}, _by_queue)


def _by_queue(rows: query.Rows, count: int) -> dict[str, int]:
    return {queue: waiting for queue, waiting in rows}
