"""The named statements of `awa_django/storage/sql/unique.py` (job_insert_many_unique and
the key lookups) run against real PostgreSQL, and the lookups' plans on a 20,000-row
table.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import pytest

from awa_django.storage.sql import unique as unique_sql
from tests.integration.sql_helpers import (
    DEFAULT_MASK,
    KEY,
    OTHER_KEY,
    JobFactory,
    Q,
    big_table,
    explain,
    insert_unique,
    run,
    snapshot,
)

pytestmark = pytest.mark.django_db
__all__ = ["big_table"]  # the fixture, imported for the plan tests


def test_job_insert_many_unique_reports_skipped_positions_in_input_order() -> None:
    held = insert_unique()
    assert held is not None
    ids = run(
        unique_sql.job_insert_many_unique,
        kinds=["k_a", "k_b", "k_c", "k_d"],
        queues=[Q] * 4,
        args=['{"n": 0}', '{"n": 1}', '{"n": 2}', '{"n": 3}'],
        states=["available"] * 4,
        priorities=[2] * 4,
        max_attempts=[25] * 4,
        run_ats=[None] * 4,
        metadata=["{}"] * 4,
        tags=["[]", '["x"]', "[]", "[]"],
        channels=[],
        unique_keys=[None, KEY, OTHER_KEY, OTHER_KEY],  # held; new; a duplicate of the call
        unique_states=[None, DEFAULT_MASK, DEFAULT_MASK, DEFAULT_MASK],
    )
    assert ids[1] is None and ids[3] is None
    assert ids[0] is not None and ids[2] is not None and ids[0] < ids[2]
    assert snapshot(ids[0])["args"] == {"n": 0} and snapshot(ids[0])["unique_key"] is None
    assert snapshot(ids[2])["args"] == {"n": 2} and snapshot(ids[2])["unique_key"] == OTHER_KEY


def test_job_unique_holder_finds_the_holder_only() -> None:
    JobFactory(state="cancelled", unique_key=KEY, unique_states=DEFAULT_MASK)
    assert run(unique_sql.job_unique_holder, unique_key=KEY) is None
    holder = insert_unique()
    assert holder is not None
    assert run(unique_sql.job_unique_holder, unique_key=KEY) == holder.id


def test_job_unique_oldest_live_skips_terminal_jobs_and_takes_the_lowest_id() -> None:
    JobFactory(state="failed", unique_key=KEY, unique_states=DEFAULT_MASK)
    parked = JobFactory(state="waiting_external", unique_key=KEY, unique_states=DEFAULT_MASK)
    JobFactory(state="available", unique_key=KEY, unique_states=DEFAULT_MASK)
    assert run(unique_sql.job_unique_oldest_live, unique_key=KEY) == parked.id
    assert run(unique_sql.job_unique_oldest_live, unique_key=OTHER_KEY) is None


# -- plans on a realistic table -----------------------------------------------------------
@pytest.mark.usefixtures("big_table")
def test_job_unique_holder_plan_uses_the_unique_index() -> None:
    plan = explain(unique_sql.job_unique_holder, unique_key=KEY)
    assert "awa_jobs_unique_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan


@pytest.mark.usefixtures("big_table")
def test_job_unique_oldest_live_plan_uses_the_unique_key_index() -> None:
    plan = explain(unique_sql.job_unique_oldest_live, unique_key=KEY)
    assert "awa_jobs_unique_key_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan
