"""Unit tests of the bulk operations' vocabulary (`awa_django.bulk`) and the aging setting:
JobFilter checks and its JSON round trip (property-based), which states each action
touches, progress arithmetic, the aged-priority label and `priority_aging` validation."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from awa_django.bulk import ACTION_STATES, BulkAction, BulkProgress, JobFilter, check_priority
from awa_django.codec import unstorable_character
from awa_django.conf import QueueConfig, awa_settings
from awa_django.display import format_priority
from awa_django.exceptions import InvalidJobFilter, InvalidQueueName
from awa_django.states import TERMINAL_STATES, JobState

names = st.from_regex(r"[a-z0-9_]{1,30}", fullmatch=True)
moments = st.one_of(
    st.none(),
    st.datetimes(
        min_value=dt.datetime(2000, 1, 1),
        max_value=dt.datetime(2100, 1, 1),
        timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=-5))]),
    ),
)


@given(
    queue=st.one_of(st.none(), names),
    kind=st.one_of(st.none(), names),
    states=st.lists(st.sampled_from(JobState.values), unique=True).map(tuple),
    tags=st.lists(names, max_size=3).map(tuple),
    created_after=moments,
    finalized_before=moments,
)
def test_a_filter_survives_its_json_round_trip(**fields: Any) -> None:
    where = JobFilter(**fields)
    assert JobFilter.from_json(where.to_json()) == where


@pytest.mark.parametrize(
    "fields",
    [
        {"states": ("finished",)},
        {"states": "failed"},
        {"tags": ("",)},
        {"kind": ""},
        {"created_before": dt.datetime(2026, 1, 1)},
        {"finalized_after": "2026-01-01"},
        # Issue 26: each of these used to pass the filter and fail in the driver or the
        # database (DataError, UnicodeEncodeError, TypeError).
        {"kind": "a\x00"},
        {"kind": "\ud800"},
        {"kind": "k" * 201},
        {"kind": 5},
        {"tags": 5},
        {"tags": ("a\x00",)},
        {"tags": ("\udcff",)},
        {"tags": ("t" * 201,)},
        {"tags": tuple(f"t{n}" for n in range(21))},
        {"tags": (5,)},
        {"states": 5},
        {"states": None},
        {"states": ("failed\x00",)},
        {"created_after": dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))},
    ],
)
def test_bad_filters_are_invalid_job_filter(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidJobFilter):
        JobFilter(**fields)


def test_running_jobs_are_touched_by_cancel_only_and_terminal_ones_by_retry_and_discard() -> None:
    for action, states in ACTION_STATES.items():
        assert (JobState.RUNNING in states) == (action is BulkAction.CANCEL), action
        touches_terminal = bool(TERMINAL_STATES & set(states))
        assert touches_terminal == (action in (BulkAction.RETRY, BulkAction.DISCARD)), action
    assert BulkAction.DISCARD.states == ("failed",)


def test_a_filter_narrows_the_action_states_and_refuses_an_empty_intersection() -> None:
    where = JobFilter(states=("failed", "completed"))
    assert where.states_for(BulkAction.RETRY) == ("failed",)
    assert JobFilter().states_for(BulkAction.RETRY) == BulkAction.RETRY.states
    with pytest.raises(InvalidJobFilter, match="retry applies to failed, cancelled"):
        JobFilter(states=("completed",)).states_for(BulkAction.RETRY)


@pytest.mark.parametrize("priority", [-99, 103, True, 2.0, "1"])
def test_set_priority_checks_the_column_range(priority: Any) -> None:
    with pytest.raises(InvalidJobFilter):
        check_priority(priority)


@given(matched=st.integers(0, 10**7), total=st.integers(0, 10**7), finished=st.booleans())
def test_progress_fraction_stays_within_zero_and_one(
    matched: int, total: int, finished: bool
) -> None:
    progress = BulkProgress(
        id=1,
        action=BulkAction.RETRY,
        filter=JobFilter(),
        state="completed" if finished else "running",
        matched=matched,
        done=matched,
        skipped=0,
        conflicts=0,
        total_estimate=total,
        cursor=0,
    )
    assert 0.0 <= progress.fraction <= 1.0
    assert progress.finished == finished and (not finished or progress.fraction == 1.0)


def test_the_aged_priority_label_names_the_original() -> None:
    assert format_priority(2, None) == "2"
    assert format_priority(1, 4) == "1 (aged from 4)"


@pytest.mark.parametrize("seconds", [60, 0.5, 0, None])
def test_priority_aging_accepts_seconds_or_off(seconds: Any) -> None:
    with override_settings(AWA={"QUEUES": {"q": {"priority_aging": seconds}}}):
        assert awa_settings().queues["q"] == QueueConfig("q", priority_aging=seconds)


@pytest.mark.parametrize("seconds", [-1, "60", float("inf"), True])
def test_priority_aging_rejects_anything_else_with_the_fix(seconds: Any) -> None:
    with (
        override_settings(AWA={"QUEUES": {"q": {"priority_aging": seconds}}}),
        pytest.raises(ImproperlyConfigured, match=r"priority_aging.*must be a number of seconds"),
    ):
        awa_settings()


# Anything a caller might pass for a field: right and wrong types, hostile text.
NASTY = ["\x00", "\ud800", "\udcff", "\\", "'", "²", "😀", " ", "\n"]
texts = st.lists(st.sampled_from(NASTY) | st.characters(), max_size=8).map("".join) | st.text(
    max_size=210
)
anything = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.booleans(),
    texts,
    st.sampled_from(JobState.values),
    st.lists(texts | st.sampled_from(JobState.values) | st.integers(), max_size=22).map(tuple),
    st.lists(texts, max_size=3),
    st.datetimes(timezones=st.none() | st.timezones()),
)
FIELDS = ("queue", "kind", "states", "tags", "created_after", "finalized_before")


@given(fields=st.dictionaries(st.sampled_from(FIELDS), anything, max_size=4))
def test_any_input_builds_a_storable_filter_or_raises_a_typed_error(fields: dict[str, Any]) -> None:
    try:
        where = JobFilter(**fields)
    except (InvalidJobFilter, InvalidQueueName):
        return
    # Built: every text in it is one PostgreSQL can take (tests/integration runs it).
    for text in (where.queue, where.kind, *where.states, *where.tags):
        assert text is None or (unstorable_character(text) is None and 0 < len(text) <= 200)
    assert JobFilter.from_json(where.to_json()) == where


def test_the_documented_states_of_each_action_are_its_states() -> None:
    """docs/bulk-operations.md's table of "states it touches": it listed neither
    waiting_parents nor waiting_slot for cancel and set-priority, which take both."""
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "bulk-operations.md").read_text("utf-8")
    rows = dict(re.findall(r"^\| `(bulk_cancel|bulk_set_priority)` \| ([^|]+) \|", doc, re.M))
    for verb, action in (
        ("bulk_cancel", BulkAction.CANCEL),
        ("bulk_set_priority", BulkAction.SET_PRIORITY),
    ):
        assert set(rows[verb].strip().split(", ")) == set(action.states), verb
