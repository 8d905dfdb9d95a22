"""Statements on `awa_cron_schedules`: the leader's sync of declared schedules, the read it
evaluates every second, the compare-and-swap fire and the manual trigger (decision 013).

A fire and a trigger insert their job in the same statement that touches the schedule,
so a job exists iff the schedule row says it was enqueued: no double fire when two
processes briefly both lead, no lost fire when a process dies between the two writes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from awa_django.channels import channel_sql
from awa_django.snapshot import JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.fragments import JOB_COLUMN_NAMES, JOB_COLUMNS

# Params: parallel arrays names, expressions, timezones, kinds, args (json text[]), queues,
# priorities, max_attempts, tags (json text[] of string arrays), metadata (json text[]),
# policies. Additive only: it never deletes a row (another deployment may declare it), and
# an existing row keeps `paused` and `last_fire_at` (a redeploy neither resumes a paused
# schedule nor re-fires one); it is rewritten only when its definition changed, so the
# every-minute sync of an unchanged fleet writes nothing. Index: primary key (name).
# Returns the names inserted or changed.
CRON_SCHEDULE_UPSERT_MANY = Statement(
    "cron_schedule_upsert_many",
    """
INSERT INTO awa_cron_schedules AS s (name, expression, timezone, kind, args, queue, priority,
                                     max_attempts, tags, metadata, missed_fire_policy,
                                     paused, paused_by, created_at, updated_at)
SELECT r.name, r.expression, r.timezone, r.kind, r.args::jsonb, r.queue, r.priority,
       r.max_attempts, ARRAY(SELECT jsonb_array_elements_text(r.tags::jsonb)),
       r.metadata::jsonb, r.policy, false, '', now(), now()
FROM unnest(%(names)s::text[], %(expressions)s::text[], %(timezones)s::text[],
            %(kinds)s::text[], %(args)s::text[], %(queues)s::text[], %(priorities)s::int2[],
            %(max_attempts)s::int2[], %(tags)s::text[], %(metadata)s::text[],
            %(policies)s::text[])
     AS r(name, expression, timezone, kind, args, queue, priority, max_attempts, tags,
          metadata, policy)
ORDER BY r.name
ON CONFLICT (name) DO UPDATE
SET expression = EXCLUDED.expression, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind,
    args = EXCLUDED.args, queue = EXCLUDED.queue, priority = EXCLUDED.priority,
    max_attempts = EXCLUDED.max_attempts, tags = EXCLUDED.tags, metadata = EXCLUDED.metadata,
    missed_fire_policy = EXCLUDED.missed_fire_policy, updated_at = now()
WHERE (s.expression, s.timezone, s.kind, s.args, s.queue, s.priority, s.max_attempts,
       s.tags, s.metadata, s.missed_fire_policy)
      IS DISTINCT FROM
      (EXCLUDED.expression, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.args, EXCLUDED.queue,
       EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.tags, EXCLUDED.metadata,
       EXCLUDED.missed_fire_policy)
RETURNING s.name
""",
)


def cron_schedule_upsert_many(
    *,
    names: list[str],
    expressions: list[str],
    timezones: list[str],
    kinds: list[str],
    args: list[str],
    queues: list[str],
    priorities: list[int],
    max_attempts: list[int],
    tags: list[str],
    metadata: list[str],
    policies: list[str],
) -> Query[list[str]]:
    """Parallel lists, one element per declared schedule."""
    params = {
        "names": names,
        "expressions": expressions,
        "timezones": timezones,
        "kinds": kinds,
        "args": args,
        "queues": queues,
        "priorities": priorities,
        "max_attempts": max_attempts,
        "tags": tags,
        "metadata": metadata,
        "policies": policies,
    }
    return Query(CRON_SCHEDULE_UPSERT_MANY, params, _names)


def _names(rows: query.Rows, count: int) -> list[str]:
    return [row[0] for row in rows]


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What the leader evaluates a schedule from, with the database clock."""

    now: dt.datetime
    name: str
    expression: str
    timezone: str
    missed_fire_policy: str
    last_fire_at: dt.datetime | None
    created_at: dt.datetime
    resumed_at: dt.datetime | None


# No params. Every schedule that is not paused, with the database clock (`now()`), which
# is what due fires are computed against. A small table read by primary key order.
CRON_SCHEDULE_LIST_UNPAUSED = Statement(
    "cron_schedule_list_unpaused",
    """
SELECT now(), name, expression, timezone, missed_fire_policy, last_fire_at, created_at,
       resumed_at
FROM awa_cron_schedules WHERE NOT paused ORDER BY name
""",
)


def cron_schedule_list_unpaused() -> Query[list[ScheduleState]]:
    return Query(CRON_SCHEDULE_LIST_UNPAUSED, {}, _states)


def _states(rows: query.Rows, count: int) -> list[ScheduleState]:
    return [ScheduleState(*row) for row in rows]


# The job a fire or a trigger inserts, from the schedule row `s` (a CTE's RETURNING):
# available now, its id taken from the sequence by the UPDATE (so the schedule row names
# its job without a second UPDATE of the same row, which one statement cannot do).
def _insert_job(metadata: str) -> str:
    return f"""
INSERT INTO awa_jobs_hot (id, kind, queue, args, state, priority, attempt, max_attempts,
                          run_at, created_at, run_lease, errors, metadata, tags, attempted_by)
SELECT s.last_job_id, s.kind, s.queue, s.args, 'available', s.priority, 0, s.max_attempts,
       now(), now(), 0, '[]', s.metadata || {metadata}, s.tags, '{{}}'
FROM schedule s
RETURNING {JOB_COLUMNS}"""


_NEXT_JOB_ID = "nextval(pg_get_serial_sequence('awa_jobs_hot', 'id'))"
_SCHEDULE_COLUMNS = "name, kind, args, queue, priority, max_attempts, tags, metadata, last_job_id"
# The queue's wake-up hint, once per statement (one job), delivered on commit.
_NOTIFY = f"pg_notify({channel_sql('queue')}, '')::text IS NOT NULL"

# Params: name, expected_last (the last_fire_at the leader read; NULL for a first fire),
# fire_at, fire_time (fire_at as ISO 8601 in the schedule's zone, for the job's metadata).
# The compare-and-swap: the UPDATE applies only if nobody moved last_fire_at since it was
# read and the schedule is not paused; the job is inserted from its RETURNING, in the same
# statement. Zero rows: another leader took this fire (or the schedule was paused or
# removed meanwhile). Two concurrent fires serialise on the row lock; the second re-checks
# last_fire_at after the first commits and matches nothing. Index: primary key (name).
CRON_SCHEDULE_FIRE = Statement(
    "cron_schedule_fire",
    f"""
WITH schedule AS (
    UPDATE awa_cron_schedules
    SET last_fire_at = %(fire_at)s::timestamptz, last_job_id = {_NEXT_JOB_ID},
        updated_at = now()
    WHERE name = %(name)s AND NOT paused
      AND last_fire_at IS NOT DISTINCT FROM %(expected_last)s::timestamptz
    RETURNING {_SCHEDULE_COLUMNS}
), inserted AS ({
        _insert_job(
            "jsonb_build_object('cron_name', s.name, 'cron_fire_time', %(fire_time)s::text)"
        )
    }
)
SELECT {JOB_COLUMN_NAMES} FROM inserted WHERE {_NOTIFY}
""",
)


def cron_schedule_fire(
    *, name: str, expected_last: dt.datetime | None, fire_at: dt.datetime, fire_time: str
) -> Query[JobSnapshot | None]:
    """The job this fire enqueued, or None when the compare-and-swap lost."""
    params = {
        "name": name,
        "expected_last": expected_last,
        "fire_at": fire_at,
        "fire_time": fire_time,
    }
    return Query(CRON_SCHEDULE_FIRE, params, query.first_job)


# Params: name. Trigger-now: one job at once, paused or not, with cron_fire_time = now()
# and triggered_manually; last_fire_at is left alone, so the schedule's own fires go on
# as if nothing happened (a concurrent fire waits for the row lock, then still matches).
CRON_SCHEDULE_TRIGGER = Statement(
    "cron_schedule_trigger",
    f"""
WITH schedule AS (
    UPDATE awa_cron_schedules SET last_job_id = {_NEXT_JOB_ID}, updated_at = now()
    WHERE name = %(name)s
    RETURNING {_SCHEDULE_COLUMNS}
), inserted AS ({
        _insert_job(
            "jsonb_build_object('cron_name', s.name, 'cron_fire_time', now(), "
            "'triggered_manually', true)"
        )
    }
)
SELECT {JOB_COLUMN_NAMES} FROM inserted WHERE {_NOTIFY}
""",
)


def cron_schedule_trigger(*, name: str) -> Query[JobSnapshot | None]:
    """The job enqueued, or None when there is no schedule `name`."""
    return Query(CRON_SCHEDULE_TRIGGER, {"name": name}, query.first_job)
