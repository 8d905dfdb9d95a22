"""`awa_django.cron` without a database: expression and zone checks, and which fires are
due under each missed-fire policy (the DST days are in tests/integration/test_cron.py,
driven through the scheduler)."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from awa_django.cron import (
    MissedFirePolicy,
    check_expression,
    check_timezone,
    due_fires,
    missed_before,
    next_fire_after,
    upcoming_fire,
)
from awa_django.exceptions import InvalidSchedule

UTC = ZoneInfo("UTC")
T0 = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_expressions_have_five_or_six_fields_and_are_normalised() -> None:
    assert check_expression(" 0  2 * * * ") == "0 2 * * *"
    assert check_expression("*/10 * * * * *") == "*/10 * * * * *"
    for bad in ("* * * *", "* * * * * * *", "61 * * * *", "0 2 * * mon#9", 5):
        with pytest.raises(InvalidSchedule):
            check_expression(bad)


def test_zones_are_iana_names() -> None:
    assert check_timezone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
    for bad in ("", "Mars/Base", "../etc/passwd", None):
        with pytest.raises(InvalidSchedule):
            check_timezone(bad)


def test_six_fields_fire_on_seconds() -> None:
    assert next_fire_after("*/10 * * * * *", UTC, T0) == T0 + dt.timedelta(seconds=10)
    assert next_fire_after("* * * * *", UTC, T0) == T0 + dt.timedelta(minutes=1)


GRACE = dt.timedelta(seconds=61)  # CRON_INTERVAL + CRON_GRACE by default


def due(
    expression: str, after: dt.datetime, now: dt.datetime, policy: MissedFirePolicy, **kw: Any
) -> list[dt.datetime]:
    """`due_fires` in UTC, with the default window and no resume."""
    missed = missed_before(now, GRACE, kw.pop("resumed_at", None))
    return due_fires(expression, UTC, after, now, policy, missed=missed, **kw)


def test_due_fires_are_strictly_after_the_last_and_at_most_now() -> None:
    now = T0 + dt.timedelta(minutes=3, seconds=30)  # T0+1min is missed: older than 61 s
    catch_up = due("* * * * *", T0, now, MissedFirePolicy.CATCH_UP)
    assert catch_up == [T0 + dt.timedelta(minutes=m) for m in (1, 2, 3)]
    coalesce = due("* * * * *", T0, now, MissedFirePolicy.COALESCE)
    assert coalesce == [T0 + dt.timedelta(minutes=3)]
    assert due("* * * * *", now, now, MissedFirePolicy.COALESCE) == []
    # A fire exactly at now is due.
    exact = T0 + dt.timedelta(minutes=1)
    assert due("* * * * *", T0, exact, MissedFirePolicy.COALESCE) == [exact]


def test_catch_up_is_capped_and_coalesce_does_not_walk_a_long_outage() -> None:
    later = T0 + dt.timedelta(days=30)  # 2.6 million missed seconds
    fires = due("* * * * * *", T0, later, MissedFirePolicy.CATCH_UP, limit=100)
    assert len(fires) == 100 and fires[0] == T0 + dt.timedelta(seconds=1)
    assert due("* * * * * *", T0, later, MissedFirePolicy.COALESCE) == [later]


@pytest.mark.parametrize("policy", list(MissedFirePolicy))
def test_a_late_pass_of_a_healthy_leader_enqueues_every_fire_it_owes(
    policy: MissedFirePolicy,
) -> None:
    """Issue 26: a pass 1.05 s after the previous one owes two per-second fires; coalescing
    them dropped one under a healthy leader."""
    now = T0 + dt.timedelta(seconds=2, milliseconds=30)
    assert due("* * * * * *", T0, now, policy) == [T0 + dt.timedelta(seconds=s) for s in (1, 2)]


@pytest.mark.parametrize(("gap", "coalesced"), [(61, False), (62, True), (600, True)])
def test_coalesce_applies_once_the_oldest_owed_fire_is_older_than_the_window(
    gap: int, coalesced: bool
) -> None:
    now = T0 + dt.timedelta(seconds=gap)
    fires = due("* * * * * *", T0, now, MissedFirePolicy.COALESCE)
    everything = [T0 + dt.timedelta(seconds=s) for s in range(1, gap + 1)]
    assert fires == ([now] if coalesced else everything)
    assert due("* * * * * *", T0, now, MissedFirePolicy.CATCH_UP) == everything[:100]


def test_fires_due_before_a_resume_are_missed_however_short_the_pause() -> None:
    now = T0 + dt.timedelta(seconds=5, milliseconds=500)
    resumed_at = now - dt.timedelta(milliseconds=200)  # paused from before T0+1 until then
    coalesce = due("* * * * * *", T0, now, MissedFirePolicy.COALESCE, resumed_at=resumed_at)
    assert coalesce == [T0 + dt.timedelta(seconds=5)]
    catch_up = due("* * * * * *", T0, now, MissedFirePolicy.CATCH_UP, resumed_at=resumed_at)
    assert catch_up == [T0 + dt.timedelta(seconds=s) for s in range(1, 6)]
    # A resume long ago changes nothing: the fires after it are judged by their age.
    old = T0 - dt.timedelta(days=1)
    assert len(due("* * * * * *", T0, now, MissedFirePolicy.COALESCE, resumed_at=old)) == 5


def test_missed_before_is_the_later_of_the_window_and_the_resume() -> None:
    assert missed_before(T0, GRACE, None) == T0 - GRACE
    assert missed_before(T0, GRACE, T0 - dt.timedelta(seconds=1)) == T0 - dt.timedelta(seconds=1)
    assert missed_before(T0, GRACE, T0 - dt.timedelta(hours=1)) == T0 - GRACE


def test_upcoming_fire_shows_the_oldest_owed_fire_under_catch_up_only() -> None:
    now = T0 + dt.timedelta(minutes=10, seconds=1)
    assert upcoming_fire("* * * * *", "UTC", "catch_up", T0, T0, now) == T0 + dt.timedelta(
        minutes=1
    )
    assert upcoming_fire("* * * * *", "UTC", "coalesce", T0, T0, now) == T0 + dt.timedelta(
        minutes=11
    )
    assert upcoming_fire("* * * * *", "Mars/Base", "coalesce", T0, T0, now) is None
