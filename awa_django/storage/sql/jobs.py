"""Statements on `awa_jobs_hot` (with the lease row where an attempt ends): enqueue, claim,
the guarded attempt writes, and what a running handler asks of its row."""

from __future__ import annotations

import datetime as dt
import functools
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from awa_django.snapshot import JobSnapshot, assemble
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.arrays import int_array, text_array, timestamptz_array
from awa_django.storage.sql.fragments import (
    ATTEMPT_ERRORS,
    ATTEMPT_PROGRESS,
    EPOCH_SPACE,
    J_JOB_COLUMNS,
    JOB_COLUMNS,
    LEASE_EPOCH_SETTING,
    NOTIFY_ONCE,
    UNIQUE_ARBITER,
    attempt_owned,
)
from awa_django.storage.sql.transitions import ATTEMPT_MOVES, COMPLETE, Move, update

# (priority, run_at, id): the order in which jobs of one queue are claimed.
DispatchKey = tuple[int, dt.datetime, int]


def _insert_one_sql(*, unique: bool) -> str:
    """job_insert_one and its unique twin differ only in the key columns and ON CONFLICT,
    so non-unique enqueues keep a statement that never mentions the key."""
    columns = ", unique_key, unique_states" if unique else ""
    values = ", %(unique_key)s::bytea, %(unique_states)s::varchar" if unique else ""
    conflict = f"ON CONFLICT {UNIQUE_ARBITER} DO NOTHING" if unique else ""
    return f"""
WITH inserted AS (
    INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts,
                              run_at, created_at, run_lease, errors, metadata, tags,
                              attempted_by, django_task{columns})
    VALUES (%(kind)s, %(queue)s, %(args)s::jsonb, %(state)s::text, %(priority)s, 0,
            %(max_attempts)s, coalesce(%(run_at)s::timestamptz, now()), now(), 0, '[]',
            %(metadata)s::jsonb, %(tags)s::text[], '{{}}', %(django_task)s::jsonb{values})
    {conflict}
    RETURNING id, run_at, created_at
)
SELECT id, run_at, created_at FROM inserted WHERE {NOTIFY_ONCE}
"""


# Params: kind, queue, args (json text), state ('available'|'scheduled'), priority,
# max_attempts, run_at (NULL = now()), metadata (json text), tags text[], django_task (json
# text or NULL), channels text[]. Index: none read; inserts maintain the partial indexes.
# Returns only what the database chose (id, run_at, created_at): the rest of the row is
# the parameters (_written). Returning the whole row, its jsonb cast to text, cost a
# quarter of a single enqueue's time on top of a plain INSERT ... RETURNING id.
JOB_INSERT_ONE = Statement("job_insert_one", _insert_one_sql(unique=False), prepared=True)

# job_insert_one's params plus unique_key (16 bytes) and unique_states (bit(8) text).
# Index: awa_jobs_unique_idx, the arbiter. A live holder of the key makes it insert
# nothing and return no row, with no error, so the caller's transaction needs no
# savepoint; a holder not yet committed is waited for (then: nothing if it committed,
# the insert if it rolled back). No row: the Client asks job_unique_holder who holds it.
JOB_INSERT_ONE_UNIQUE = Statement(
    "job_insert_one_unique", _insert_one_sql(unique=True), prepared=True
)


class RowColumns(TypedDict):
    """One planned row as job_insert_one (and its unique twin) take it."""

    kind: str
    queue: str
    args: str
    state: str
    priority: int
    max_attempts: int
    run_at: dt.datetime | None
    metadata: str
    tags: Sequence[str]
    django_task: str | None
    channels: Sequence[str]


def job_insert_one(**columns: Unpack[RowColumns]) -> Query[JobSnapshot]:
    return Query(JOB_INSERT_ONE, _insert_one_params(columns), _written(columns))


def job_insert_one_unique(
    *, unique_key: bytes, unique_states: str, **columns: Unpack[RowColumns]
) -> Query[JobSnapshot | None]:
    """The new row, or None when a live job holds `unique_key` (nothing was written)."""
    params = {
        **_insert_one_params(columns),
        "unique_key": unique_key,
        "unique_states": unique_states,
    }
    return Query(JOB_INSERT_ONE_UNIQUE, params, _written_or_none(columns))


def _insert_one_params(columns: RowColumns) -> dict[str, Any]:
    """The columns as job_insert_one's parameters, its two arrays as literals."""
    return {
        **columns,
        "tags": text_array(columns["tags"]),
        "channels": text_array(columns["channels"]),
    }


def _written(columns: RowColumns) -> Callable[[query.Rows, int], JobSnapshot]:
    """The row job_insert_one wrote: its columns, with the id and times the database
    chose. JSON columns are decoded from the text written (a worker reads jsonb's
    rendering of it, which may spell a number differently: 1e16 comes back 10000000000000000)."""

    kind, queue, state = columns["kind"], columns["queue"], str(columns["state"])
    priority, max_attempts = columns["priority"], columns["max_attempts"]
    args, metadata, tags, task = (
        columns["args"],
        columns["metadata"],
        columns["tags"],
        columns["django_task"],
    )

    def read(rows: query.Rows, count: int) -> JobSnapshot:
        job_id, run_at, created_at = rows[0]
        # Positional, in JobSnapshot's field order (snapshot.assemble; the keywords of its
        # __init__ cost a single enqueue 5 us more).
        return assemble(
            job_id,
            kind,
            queue,
            json.loads(args),
            state,  # a plain str, as read from the database
            priority,
            0,  # attempt
            max_attempts,
            run_at,
            created_at,
            None,  # attempted_at
            None,  # finalized_at
            0,  # run_lease
            [],  # errors
            {} if metadata == "{}" else json.loads(metadata),
            list(tags),
            None,  # progress
            None,  # callback_id
            None,  # callback_timeout_at
            None,  # result
            [],  # attempted_by
            None if task is None else json.loads(task),
            None,  # original_priority
        )

    return read


def _written_or_none(columns: RowColumns) -> Callable[[query.Rows, int], JobSnapshot | None]:
    """`_written`, or None when the statement wrote nothing (a held unique key)."""
    written = _written(columns)
    return lambda rows, count: written(rows, count) if rows else None


# Params: parallel arrays kinds, queues, args (json text[]), states, priorities,
# max_attempts, run_ats (NULL elements = now()), metadata (json text[]), tags (json text[]
# of string arrays: PostgreSQL has no ragged text[][]), channels text[] (distinct queues).
# One statement for any number of rows; returns ids in input order (WITH ORDINALITY).
JOB_INSERT_MANY = Statement(
    "job_insert_many",
    f"""
WITH inserted AS (
    INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts,
                              run_at, created_at, run_lease, errors, metadata, tags,
                              attempted_by)
    SELECT r.kind, r.queue, r.args::jsonb, r.state, r.priority, 0, r.max_attempts,
           coalesce(r.run_at, now()), now(), 0, '[]', r.metadata::jsonb,
           CASE WHEN r.tags = '[]' THEN '{{}}'::text[]
                ELSE ARRAY(SELECT jsonb_array_elements_text(r.tags::jsonb)) END,
           '{{}}'
    FROM unnest(%(kinds)s::text[], %(queues)s::text[], %(args)s::text[], %(states)s::text[],
                %(priorities)s::int2[], %(max_attempts)s::int2[], %(run_ats)s::timestamptz[],
                %(metadata)s::text[], %(tags)s::text[])
         WITH ORDINALITY AS r(kind, queue, args, state, priority, max_attempts, run_at,
                               metadata, tags, ord)
    ORDER BY r.ord
    RETURNING id
)
SELECT id FROM inserted WHERE {NOTIFY_ONCE} ORDER BY id
""",
    prepared=True,
)


class BulkColumns(TypedDict):
    """Planned rows as the parallel arrays job_insert_many (and its unique twin) take;
    `tags` holds each row's tags as a JSON array text (PostgreSQL has no ragged text[][])."""

    kinds: list[str]
    queues: list[str]
    args: list[str]
    states: list[str]
    priorities: list[int]
    max_attempts: list[int]
    run_ats: list[dt.datetime | None]
    metadata: list[str]
    tags: list[str]
    channels: Sequence[str]


def job_insert_many(**columns: Unpack[BulkColumns]) -> Query[list[int]]:
    """The bulk insert; ids in input order."""
    return Query(JOB_INSERT_MANY, bulk_insert_params(columns), _ids)


def bulk_insert_params(columns: BulkColumns) -> dict[str, str]:
    """job_insert_many's parameters (and its unique twin's) as array literals."""
    return {
        "kinds": text_array(columns["kinds"]),
        "queues": text_array(columns["queues"]),
        "args": text_array(columns["args"]),
        "states": text_array(columns["states"]),
        "priorities": int_array(columns["priorities"]),
        "max_attempts": int_array(columns["max_attempts"]),
        "run_ats": timestamptz_array(columns["run_ats"]),
        "metadata": text_array(columns["metadata"]),
        "tags": text_array(columns["tags"]),
        "channels": text_array(columns["channels"]),
    }


def _ids(rows: query.Rows, count: int) -> list[int]:
    return [row[0] for row in rows]


# Params: queue, limit, worker_id, and deadline_seconds (0 = no deadline) when it writes the
# leases (`lease_now`); the `_after` form
# also floor_priority, floor_run_at, floor_id: the dispatch key of the last row this
# dispatcher claimed (worker/claim_floor.py, decision 027). A worker's kinds (ClaimKinds,
# decision 032) are written into the text, not passed.
# Index: awa_jobs_dispatch_idx (queue, priority, run_at, id) WHERE state='available'. The
# floor's row comparison is a start key of that index scan (queue is an equality on the
# leading column), so the scan begins at the floor instead of walking the entries of every
# row claimed since the oldest open snapshot in the cluster: those stay in the index, not
# yet dead to everyone, until that snapshot ends.
# Traps: (1) it must be a CTE: as a FROM sub-select the planner may merge it and lose the
# LIMIT under load; (2) the outer `state = 'available'` re-check is mandatory: a candidate
# seen before a concurrent claim committed must not be claimed twice (Awa bug #134);
# (3) the paused check reads awa_queue_state by primary key, once per statement;
# (4) the floor is a separate statement, not `%(floor)s IS NULL OR ...`: an OR cannot be
# an index start key, and a generic plan would scan from the beginning; (5) the limit is
# written into the text (one statement per limit, up to LITERAL_LIMITS): a generic
# plan then knows how few rows come, is as cheap as a custom one, and PostgreSQL keeps it
# after five executions instead of planning every claim (0.2 ms of a 1 ms claim); with
# `LIMIT $n` it assumes a tenth of the queue and re-plans each time. The update takes the
# candidates as an id array (`= ANY`, read through the primary key) rather than joining
# them, so no plan can hash-join the candidates against the whole table.
# Leases (decision 030): with `lease_now` the claim writes each job's lease row, with the
# queue's deadline; without it, the worker's first heartbeat writes it (within one
# heartbeat interval: the claim then writes nothing but the jobs' rows), and until then
# the job's own attempted_at stands for its heartbeat in the stale-heartbeat rescue.
# run_lease (decision 029): on a connection with a lease epoch (a worker's, not behind a
# transaction pooler) at least epoch * EPOCH_SPACE, so no claim lost in a crash is handed
# out again, and the claim commits without waiting for the WAL flush (`set_config(...,
# true)` lasts until this statement's commit). Without one (Django's connection, a pooler)
# the claim stays durable and counts on (+1), except from a run_lease an epoch handed out:
# then it jumps above every epoch taken so far, which a lost claim's run_lease is below.
# The epoch is a MATERIALIZED CTE so that set_config runs once per claim that updates a
# row (never for an empty claim, which writes nothing anyway).
def _claim_sql(after_floor: str, limit: str, lease_now: bool, kinds: str = "") -> str:
    leased = _CLAIM_LEASES if lease_now else ""
    return f"""
WITH lease_epoch AS MATERIALIZED (
    SELECT epoch * {EPOCH_SPACE} AS base,
           CASE WHEN epoch IS NOT NULL
                THEN set_config('synchronous_commit', 'off', true) END AS flush_wait
    FROM (SELECT nullif(current_setting('{LEASE_EPOCH_SETTING}', true), '')::int8 AS epoch)
         AS setting
), candidates AS (
    SELECT id FROM awa_jobs_hot
    WHERE state = 'available' AND queue = %(queue)s AND run_at <= now(){after_floor}{kinds}
      AND NOT EXISTS (SELECT 1 FROM awa_queue_state qs
                      WHERE qs.queue = %(queue)s AND qs.paused)
    ORDER BY priority, run_at, id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE awa_jobs_hot j
    SET state = 'running', attempt = j.attempt + 1,
        run_lease = greatest(j.run_lease + 1, coalesce(
            (SELECT base FROM lease_epoch),
            CASE WHEN j.run_lease + 1 >= {EPOCH_SPACE}
                 THEN (SELECT (epoch + 1) * {EPOCH_SPACE} FROM awa_lease_epochs
                       WHERE id = 1) END)),
        attempted_at = now(),
        attempted_by = (j.attempted_by || %(worker_id)s::varchar)[
            greatest(1, cardinality(j.attempted_by) - 8):]
    WHERE j.id = ANY(ARRAY(SELECT id FROM candidates)) AND j.state = 'available'
    RETURNING {J_JOB_COLUMNS}
){leased}
SELECT * FROM claimed ORDER BY priority, run_at, id
"""


# A lease left by an earlier attempt of the job (one the heartbeat wrote after that
# attempt ended) is taken over.
_CLAIM_LEASES = """, leased AS (
    INSERT INTO awa_active_leases (job_id, run_lease, queue, worker_id, claimed_at,
                                   heartbeat_at, deadline_at)
    SELECT id, run_lease, queue, %(worker_id)s, now(), now(),
           CASE WHEN %(deadline_seconds)s::float8 > 0
                THEN now() + make_interval(secs => %(deadline_seconds)s::float8) END
    FROM claimed
    ON CONFLICT (job_id) DO UPDATE
    SET run_lease = EXCLUDED.run_lease, worker_id = EXCLUDED.worker_id,
        claimed_at = EXCLUDED.claimed_at, heartbeat_at = EXCLUDED.heartbeat_at,
        deadline_at = EXCLUDED.deadline_at
)"""


_FLOOR = (
    "\n      AND (priority, run_at, id) > (%(floor_priority)s::int2,"
    " %(floor_run_at)s::timestamptz, %(floor_id)s::int8)"
)
# Claims of up to this many rows have their limit written in, so a queue of concurrency up
# to 128 is planned once: a claim of 50 with `LIMIT $n` was planned anew every time (2.21
# against 1.97 ms). Each limit is built when first asked for. The bound keeps the distinct
# texts, and so psycopg's per-connection cache of prepared statements, small.
LITERAL_LIMITS = 128


@dataclass(frozen=True, slots=True)
class ClaimKinds:
    """The kinds a worker claims (decision 032): those it has a handler for, the import
    paths of django.tasks tasks when it resolves them (`dotted`) except those it could not
    resolve (`refused`), and any other kind once a job of it has been due for `grace`
    seconds, so that it fails (the worker that claims it has no handler)."""

    known: tuple[str, ...]
    dotted: bool
    refused: tuple[str, ...]
    grace: float


# The filter is written into the claim's text, not passed: a worker's kinds are fixed for
# its life (its refused paths change rarely, each a new text), and as a constant the array
# is hashed once per plan (PostgreSQL 14+), where a parameter of a generic plan would be
# searched element by element for every row. It is a filter on the dispatch index scan,
# not a condition of it: a claim walks past the available jobs of kinds it lacks (only a
# rolling deploy leaves any at the head of a queue, and the claim floor skips them between
# full scans). Trap: no sub-select here. A `NOT EXISTS` on awa_worker_instances (to spare
# a kind some live worker lists) made PostgreSQL reject the generic plan of the floor form
# and plan 1,254 of 1,769 claims of a 10,000-job drain anew: +35 % backend CPU per job.
def _kinds_filter(kinds: ClaimKinds | None) -> str:
    if kinds is None:
        return ""
    branches = [f"kind = ANY({_text_literal(kinds.known)}::text[])"]
    if kinds.dotted:
        refused = f" AND kind <> ALL({_text_literal(kinds.refused)}::text[])"
        branches.append(f"strpos(kind, '.') > 0{refused if kinds.refused else ''}")
    branches.append(f"run_at <= now() - make_interval(secs => {float(kinds.grace)!r})")
    return "\n      AND (" + "\n           OR ".join(branches) + ")"


def _text_literal(values: Sequence[str]) -> str:
    """A text[] literal as a quoted SQL constant, `%` doubled for the parameter syntax."""
    return "'" + text_array(values).replace("'", "''").replace("%", "%%") + "'"


@functools.cache
def _claim_statement(
    after: bool, limit: int | None, lease_now: bool, kinds: ClaimKinds | None = None
) -> Statement:
    """The claim's text for a floor or none, a written-in limit or `%(limit)s`, whether it
    writes the leases, and the kinds it takes (None: every kind)."""
    written = "%(limit)s" if limit is None else str(limit)
    text = _claim_sql(_FLOOR if after else "", written, lease_now, _kinds_filter(kinds))
    return Statement("job_claim_many", text)


def job_claim_many(
    *,
    queue: str,
    limit: int,
    worker_id: str,
    deadline_seconds: float,
    lease_now: bool,
    after: DispatchKey | None = None,
    kinds: ClaimKinds | None = None,
) -> Query[list[JobSnapshot]]:
    """Claim up to `limit` available jobs in dispatch order; with `after`, only those whose
    dispatch key is greater (the rest of a pass through the queue); with `kinds`, only
    those (ClaimKinds)."""
    params: dict[str, object] = {"queue": queue, "worker_id": worker_id}
    if lease_now:
        params["deadline_seconds"] = deadline_seconds
    if after is not None:
        params["floor_priority"], params["floor_run_at"], params["floor_id"] = after
    written = 0 < limit <= LITERAL_LIMITS
    if not written:
        params["limit"] = limit
    statement = _claim_statement(after is not None, limit if written else None, lease_now, kinds)
    return Query(statement, params, query.jobs)


# transitions.COMPLETE for a batch of attempts.
# Params: ids int8[], leases int8[], results (json text[], NULL elements for no result),
# both sorted by id so concurrent flushes lock rows in one order (no deadlocks).
# Guard: (id, state='running', run_lease) per row; RETURNING tells applied from stale.
# Index: primary key. The lease rows go in the same statement.
# Trap: the state guard is written so that no index can serve it (`|| ''`). Statistics
# taken while a backlog waited say almost nothing is `running`, and the planner would then
# read awa_jobs_state_id_part_idx for 'running' and join the ids to it: that scan visits an
# entry for every job ever claimed since the oldest open snapshot in the cluster, so under
# a long transaction every completion slowed with the drain (decision 027).
def _complete_many_sql(returning: str, selected: str) -> str:
    finished = update(
        COMPLETE,
        source=_COMPLETIONS,
        where=f"j.id = t.id AND j.run_lease = t.run_lease AND {_UNINDEXED_RUNNING}",
        returning=returning,
        result="t.result::jsonb",
    )
    return f"""
WITH finished AS (
    {finished}
), {COMPLETE.released("finished", "f", attempt=True)}
SELECT {selected} FROM finished
"""


_UNINDEXED_RUNNING = COMPLETE.guard("j", indexable=False)
_COMPLETIONS = """unnest(%(ids)s::int8[], %(leases)s::int8[], %(results)s::text[])
         AS t(id, run_lease, result)"""
JOB_COMPLETE_MANY = Statement("job_complete_many", _complete_many_sql(J_JOB_COLUMNS, "*"))
# The same completion, returning only what the database chose: for batches whose events
# no hook reads (the completer builds their rows from the claimed ones). The whole rows
# cost PostgreSQL their jsonb rendering and the worker their decoding: 10-15 us of
# a job's ~200 us of CPU in a drain at concurrency 10 (docs/performance.md).
JOB_COMPLETE_MANY_LEAN = Statement(
    "job_complete_many_lean",
    _complete_many_sql("j.id, j.run_lease, j.finalized_at", "id, finalized_at"),
)


def _complete_many_params(
    ids: list[int], leases: list[int], results: list[str | None]
) -> dict[str, str]:
    return {"ids": int_array(ids), "leases": int_array(leases), "results": text_array(results)}


def job_complete_many(
    *, ids: list[int], leases: list[int], results: list[str | None]
) -> Query[list[JobSnapshot]]:
    """Parallel lists, sorted by id; returns the rows whose completion applied."""
    return Query(JOB_COMPLETE_MANY, _complete_many_params(ids, leases, results), query.jobs)


def job_complete_many_lean(
    *, ids: list[int], leases: list[int], results: list[str | None]
) -> Query[dict[int, dt.datetime]]:
    """job_complete_many, answering only {id: finalized_at} of the completions that applied."""
    params = _complete_many_params(ids, leases, results)
    return Query(JOB_COMPLETE_MANY_LEAN, params, _finalized_at)


def _finalized_at(rows: query.Rows, count: int) -> dict[int, dt.datetime]:
    return {job_id: finalized_at for job_id, finalized_at in rows}


# Params: id, run_lease, result (json text or NULL). transitions.COMPLETE, as
# job_complete_many, for one attempt that is not batched: an atomic handler's completion
# (in its own transaction, on Django's connection, which does not prepare statements: no
# unnest to plan each time), a completion with follow-up jobs, the inline runner's. Guard
# and lease release as job_complete_many. Index: primary key. No row = stale.
JOB_COMPLETE_ONE = Statement(
    "job_complete_one",
    f"""
WITH finished AS (
    {
        update(
            COMPLETE,
            where=f"id = %(id)s AND run_lease = %(run_lease)s AND {COMPLETE.guard()}",
            returning=JOB_COLUMNS,
            alias="",
            result="%(result)s::jsonb",
        )
    }
), {COMPLETE.released("finished", "f", attempt=True)}
SELECT * FROM finished
""",
)


def job_complete_one(*, id: int, run_lease: int, result: str | None) -> Query[JobSnapshot | None]:
    """The committed row, or None when the completion is stale."""
    params = {"id": id, "run_lease": run_lease, "result": result}
    return Query(JOB_COMPLETE_ONE, params, query.first_job)


# The worker's individual outcomes (transitions.ATTEMPT_MOVES: retry, RetryAfter, snooze,
# hand-back, cancel, fail, park), each by (id, run_lease): `move` applied to the attempt
# that still owns the job, with the attempt's error entry and latest progress, its own
# lease released. One text per move (built when first used, then prepared per connection
# like any other): each sets only its own columns, where one text with the target state
# as a parameter needed a CASE per column and an OR on the park's token.
# Params: id, run_lease, error (text or NULL), error_type (the exception class path or
# NULL), terminal (bool), progress (json text or NULL: keep the stored one); delay_seconds
# for RetryAfter and snooze; callback_id for a park (transitions.PARK.requires).
# Index: primary key. Zero rows = stale outcome (rescued, cancelled or re-claimed).
def _set_state_sql(move: Move) -> str:
    moved = update(
        move,
        ("errors", ATTEMPT_ERRORS),
        ("progress", ATTEMPT_PROGRESS),
        where=attempt_owned("j") + move.required("j"),
        returning=J_JOB_COLUMNS,
    )
    return f"""
WITH moved AS (
    {moved}
), {move.released("moved", attempt=True)}
SELECT * FROM moved
"""


@functools.cache
def _set_state_statement(move: Move) -> Statement:
    if move not in ATTEMPT_MOVES:
        raise ValueError(f"{move.name} is not the outcome of an attempt")
    return Statement("job_set_state_if_running", _set_state_sql(move))


def job_set_state_if_running(
    *,
    id: int,
    run_lease: int,
    move: Move,
    delay_seconds: float | None = None,
    error: str | None = None,
    error_type: str | None = None,
    terminal: bool = False,
    progress: str | None = None,
    callback_id: uuid.UUID | None = None,
) -> Query[JobSnapshot | None]:
    """The committed row, or None when the outcome is stale."""
    params = {
        "id": id,
        "run_lease": run_lease,
        "delay_seconds": delay_seconds,
        "error": error,
        "error_type": error_type,
        "terminal": terminal,
        "progress": progress,
        "callback_id": callback_id,
    }
    return Query(_set_state_statement(move), params, query.first_job)


# Params: id, run_lease, progress (json text). Guarded like every attempt write.
JOB_PROGRESS_FLUSH = Statement(
    "job_progress_flush",
    f"""
UPDATE awa_jobs_hot SET progress = %(progress)s::jsonb
WHERE {attempt_owned()}
""",
    returns_rows=False,
)


def job_progress_flush(*, id: int, run_lease: int, progress: str) -> Query[bool]:
    """True when the attempt still owns the job (the progress was written)."""
    params = {"id": id, "run_lease": run_lease, "progress": progress}
    return Query(JOB_PROGRESS_FLUSH, params, query.matched)


# Params: id. Reads one row by primary key.
JOB_GET = Statement("job_get", f"SELECT {JOB_COLUMNS} FROM awa_jobs_hot WHERE id = %(id)s")


def job_get(*, id: int) -> Query[JobSnapshot | None]:
    return Query(JOB_GET, {"id": id}, query.first_job)


# Params: id, run_lease, callback_id (a fresh uuid4 from the worker), timeout_seconds.
# Re-registering replaces the token, so an older token can no longer resolve the job.
JOB_REGISTER_CALLBACK = Statement(
    "job_register_callback",
    f"""
UPDATE awa_jobs_hot
SET callback_id = %(callback_id)s::uuid,
    callback_timeout_at = now() + make_interval(secs => %(timeout_seconds)s::float8)
WHERE {attempt_owned()}
RETURNING callback_id, callback_timeout_at
""",
)


def job_register_callback(
    *, id: int, run_lease: int, callback_id: uuid.UUID, timeout_seconds: float
) -> Query[tuple[uuid.UUID, dt.datetime] | None]:
    """(callback_id, timeout_at), or None when the attempt no longer owns the job."""
    params = {
        "id": id,
        "run_lease": run_lease,
        "callback_id": callback_id,
        "timeout_seconds": timeout_seconds,
    }
    return Query(JOB_REGISTER_CALLBACK, params, _token)


def _token(rows: query.Rows, count: int) -> tuple[uuid.UUID, dt.datetime] | None:
    return (rows[0][0], rows[0][1]) if rows else None


# Params: id, run_lease, callback_id. Sequential wait (T11, wait mode): the handler keeps
# its slot and its lease; the lease's deadline is lifted because waiting is not running.
JOB_ENTER_WAIT = Statement(
    "job_enter_wait",
    f"""
WITH waiting AS (
    UPDATE awa_jobs_hot SET state = 'waiting_external'
    WHERE {attempt_owned()}
      AND callback_id = %(callback_id)s::uuid
    RETURNING id, run_lease
), lifted AS (
    UPDATE awa_active_leases l SET deadline_at = NULL
    FROM waiting w WHERE l.job_id = w.id AND l.run_lease = w.run_lease
)
SELECT id FROM waiting
""",
)


def job_enter_wait(*, id: int, run_lease: int, callback_id: uuid.UUID) -> Query[bool]:
    """True when the job now waits for `callback_id` under this attempt."""
    params = {"id": id, "run_lease": run_lease, "callback_id": callback_id}
    return Query(JOB_ENTER_WAIT, params, query.matched)


# Params: id. What a sequential wait polls every 200 ms: a plain read (no lock, no
# transaction id, no write), so thousands of waiting handlers cost the wide row nothing.
# Returns (state, run_lease, has_payload).
JOB_WAIT_STATE = Statement(
    "job_wait_state",
    """
SELECT state, run_lease, callback_result IS NOT NULL
FROM awa_jobs_hot WHERE id = %(id)s
""",
)


def job_wait_state(*, id: int) -> Query[tuple[str, int, bool] | None]:
    """(state, run_lease, a resume payload is pending), or None for a deleted job."""
    return Query(JOB_WAIT_STATE, {"id": id}, _wait_state)


def _wait_state(rows: query.Rows, count: int) -> tuple[str, int, bool] | None:
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


# Params: id, run_lease. Takes the payload resume_external left in callback_result
# (clearing it) once the job runs again under this attempt; returns it as JSON text.
JOB_TAKE_CALLBACK_RESULT = Statement(
    "job_take_callback_result",
    f"""
WITH current AS (
    SELECT id, callback_result AS payload FROM awa_jobs_hot
    WHERE {attempt_owned()}
      AND callback_result IS NOT NULL
    FOR UPDATE
)
UPDATE awa_jobs_hot j SET callback_result = NULL
FROM current c WHERE j.id = c.id
RETURNING c.payload::text
""",
)


def job_take_callback_result(*, id: int, run_lease: int) -> Query[tuple[Any, ...] | None]:
    """A one-element row holding the payload as JSON text, or None (lost to another
    attempt, or nothing pending)."""
    return Query(JOB_TAKE_CALLBACK_RESULT, {"id": id, "run_lease": run_lease}, query.first)
