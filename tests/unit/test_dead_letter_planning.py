"""Dead letters planned purely (decision 016): which transitions `routed()` turns into a
move and with which reason, the event it announces, the bulk-filter guard and the
listing cursor. No database."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django.client.dead_letters import Filters, _decode_cursor, _encode_cursor
from awa_django.events import Exhausted
from awa_django.exceptions import (
    DeadLetterFilterRequired,
    InvalidDeadLetterQuery,
    TerminalError,
    UnknownJobKind,
)
from awa_django.execution.outcomes import (
    event_for,
    plan,
    plan_failure,
    plan_unknown_kind,
    routed,
    unstorable,
)
from awa_django.results import Cancel, RetryAfter, Snooze
from awa_django.snapshot import DeadLetterSnapshot
from tests.unit.test_outcomes import make_row

LAST = make_row(attempt=3, max_attempts=3)
FIRST = make_row(attempt=1, max_attempts=3)


@pytest.mark.parametrize(
    ("transition", "reason"),
    [
        (plan_failure(LAST, RuntimeError("x")), "max_attempts_exhausted"),
        (plan(LAST, RetryAfter(5)), "max_attempts_exhausted"),
        (plan_failure(FIRST, TerminalError("x")), "terminal_error"),
        (plan_unknown_kind(FIRST, UnknownJobKind("k"), 0), "terminal_error"),
        (unstorable(ValueError("x")), "terminal_error"),
    ],
)
def test_a_failure_for_good_on_a_dead_letter_queue_moves_with_its_reason(transition, reason):
    assert transition.state == "failed"
    assert routed(transition, dead_letter_queue=True).dead_letter == reason
    assert routed(transition, dead_letter_queue=False) == transition


@pytest.mark.parametrize(
    "transition",
    [
        plan_failure(FIRST, RuntimeError("x")),  # retryable
        plan(FIRST, RetryAfter(5)),
        plan(FIRST, Snooze(5)),
        plan(FIRST, Cancel("no")),
    ],
)
def test_nothing_else_moves(transition: Any) -> None:
    assert routed(transition, dead_letter_queue=True) == transition


def test_the_event_says_the_job_was_dead_lettered() -> None:
    moved = routed(plan_failure(LAST, RuntimeError("x")), dead_letter_queue=True)
    event = event_for(moved, make_row(state="failed"))
    assert isinstance(event, Exhausted) and event.dead_lettered is True
    stayed = event_for(plan_failure(LAST, RuntimeError("x")), make_row(state="failed"))
    assert isinstance(stayed, Exhausted) and stayed.dead_lettered is False


def test_bulk_operations_need_a_filter_or_all() -> None:
    with pytest.raises(DeadLetterFilterRequired):
        Filters().required("purge_dead_letters", all=False)
    assert Filters().required("purge_dead_letters", all=True).empty
    assert not Filters(ids=()).required("purge_dead_letters", all=False).empty
    with pytest.raises(InvalidDeadLetterQuery):
        Filters(ids=(True,))


@given(
    st.datetimes(
        min_value=dt.datetime(2000, 1, 1),
        max_value=dt.datetime(2200, 1, 1),
        timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=-5))]),
    ),
    st.integers(min_value=1, max_value=2**63 - 1),
)
def test_the_cursor_round_trips(at: dt.datetime, job_id: int) -> None:
    letter = DeadLetterSnapshot(
        id=job_id, kind="k", queue="q", args={}, priority=2, attempt=1, max_attempts=1,
        run_lease=1, created_at=at, attempted_at=None, errors=[], metadata={}, tags=[],
        progress=None, attempted_by=[], reason="manual", dead_lettered_at=at,
    )  # fmt: skip
    assert _decode_cursor(_encode_cursor(letter)) == (at, job_id)


@given(st.text(max_size=40))
def test_any_other_cursor_is_a_typed_error_or_a_valid_position(text: str) -> None:
    try:
        at, job_id = _decode_cursor(text)
    except InvalidDeadLetterQuery:
        return
    assert at.tzinfo is not None and isinstance(job_id, int)  # never a bare traceback
