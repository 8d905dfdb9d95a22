"""`awa_django.cron` without a database: expression and zone checks, and which fires are
due under each missed-fire policy (the DST days are in tests/integration/test_cron.py,
driven through the scheduler)."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from awa_django.cron import (
    MissedFirePolicy,
    check_expression,
    check_timezone,
    due_fires,
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


def test_due_fires_are_strictly_after_the_last_and_at_most_now() -> None:
    now = T0 + dt.timedelta(minutes=3, seconds=30)
    catch_up = due_fires("* * * * *", UTC, T0, now, MissedFirePolicy.CATCH_UP)
    assert catch_up == [T0 + dt.timedelta(minutes=m) for m in (1, 2, 3)]
    coalesce = due_fires("* * * * *", UTC, T0, now, MissedFirePolicy.COALESCE)
    assert coalesce == [T0 + dt.timedelta(minutes=3)]
    assert due_fires("* * * * *", UTC, now, now, MissedFirePolicy.COALESCE) == []
    # A fire exactly at now is due.
    exact = T0 + dt.timedelta(minutes=1)
    assert due_fires("* * * * *", UTC, T0, exact, MissedFirePolicy.COALESCE) == [exact]


def test_catch_up_is_capped_and_coalesce_does_not_walk_a_long_outage() -> None:
    later = T0 + dt.timedelta(days=30)  # 2.6 million missed seconds
    fires = due_fires("* * * * * *", UTC, T0, later, MissedFirePolicy.CATCH_UP, limit=100)
    assert len(fires) == 100 and fires[0] == T0 + dt.timedelta(seconds=1)
    assert due_fires("* * * * * *", UTC, T0, later, MissedFirePolicy.COALESCE) == [later]


def test_upcoming_fire_shows_the_oldest_owed_fire_under_catch_up_only() -> None:
    now = T0 + dt.timedelta(minutes=10, seconds=1)
    assert upcoming_fire("* * * * *", "UTC", "catch_up", T0, T0, now) == T0 + dt.timedelta(
        minutes=1
    )
    assert upcoming_fire("* * * * *", "UTC", "coalesce", T0, T0, now) == T0 + dt.timedelta(
        minutes=11
    )
    assert upcoming_fire("* * * * *", "Mars/Base", "coalesce", T0, T0, now) is None
