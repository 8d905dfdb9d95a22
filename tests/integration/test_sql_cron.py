"""The named statements of `awa_django/storage/sql/cron.py` run against real PostgreSQL.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import (
    CronSchedule,
    Job,
)
from awa_django.storage.sql import cron as cron_sql
from tests.integration.sql_helpers import (
    AGO,
    Q,
    run,
    transaction_now,
)

pytestmark = pytest.mark.django_db


# -- cron schedules -----------------------------------------------------------------------
def sync_schedule(**changes: Any) -> list[str]:
    """Sync one schedule "core-cron" (every minute, UTC) with `changes` applied."""
    params: dict[str, Any] = {
        "names": ["core-cron"],
        "expressions": ["* * * * *"],
        "timezones": ["UTC"],
        "kinds": ["core_sql"],
        "args": ['{"n": 1}'],
        "queues": [Q],
        "priorities": [2],
        "max_attempts": [5],
        "tags": ['["a", "b"]'],
        "metadata": ['{"m": 1}'],
        "policies": ["coalesce"],
    }
    return run(cron_sql.cron_schedule_upsert_many, **{**params, **changes})


def test_cron_schedule_upsert_many_inserts_updates_changed_rows_only_and_keeps_fire_state() -> None:
    assert sync_schedule() == ["core-cron"]
    row = CronSchedule.objects.get(name="core-cron")
    assert (row.args, row.tags, row.metadata, row.max_attempts) == (
        {"n": 1},
        ["a", "b"],
        {"m": 1},
        5,
    )
    assert sync_schedule() == []  # unchanged: not rewritten
    fired = transaction_now() - AGO
    CronSchedule.objects.filter(name="core-cron").update(paused=True, last_fire_at=fired)
    assert sync_schedule(expressions=["0 * * * *"], policies=["catch_up"]) == ["core-cron"]
    row.refresh_from_db()
    assert (row.expression, row.missed_fire_policy) == ("0 * * * *", "catch_up")
    assert row.paused and row.last_fire_at == fired


def test_cron_schedule_list_unpaused_reads_the_database_clock() -> None:
    sync_schedule(names=["core-cron"])
    sync_schedule(names=["core-cron-paused"])
    CronSchedule.objects.filter(name="core-cron-paused").update(paused=True)
    (state,) = run(cron_sql.cron_schedule_list_unpaused)
    assert state.name == "core-cron" and state.now == transaction_now()
    assert (state.expression, state.timezone, state.last_fire_at) == ("* * * * *", "UTC", None)


def test_cron_schedule_fire_swaps_last_fire_at_and_inserts_the_job() -> None:
    sync_schedule()
    fire_at = transaction_now().replace(second=0, microsecond=0)

    def fire(expected: dt.datetime | None) -> JobSnapshot | None:
        return run(
            cron_sql.cron_schedule_fire,
            name="core-cron",
            expected_last=expected,
            fire_at=fire_at,
            fire_time=fire_at.isoformat(),
        )

    job = fire(None)
    assert job is not None and job.state == "available" and job.tags == ["a", "b"]
    assert job.metadata == {"m": 1, "cron_name": "core-cron", "cron_fire_time": fire_at.isoformat()}
    row = CronSchedule.objects.get(name="core-cron")
    assert row.last_fire_at == fire_at and row.last_job_id == job.id
    assert fire(None) is None  # the swap already happened
    CronSchedule.objects.filter(name="core-cron").update(paused=True)
    assert fire(fire_at) is None  # paused
    assert Job.objects.filter(kind="core_sql").count() == 1


def test_cron_schedule_fire_is_one_statement(django_assert_num_queries: Any) -> None:
    sync_schedule()
    now = transaction_now()
    with django_assert_num_queries(1):
        run(
            cron_sql.cron_schedule_fire,
            name="core-cron",
            expected_last=None,
            fire_at=now,
            fire_time="t",
        )


def test_cron_schedule_trigger_inserts_a_job_and_leaves_last_fire_at() -> None:
    sync_schedule()
    job = run(cron_sql.cron_schedule_trigger, name="core-cron")
    assert job is not None and job.metadata["triggered_manually"] is True
    assert dt.datetime.fromisoformat(job.metadata["cron_fire_time"]) == transaction_now()
    row = CronSchedule.objects.get(name="core-cron")
    assert row.last_fire_at is None and row.last_job_id == job.id
    assert run(cron_sql.cron_schedule_trigger, name="missing") is None
