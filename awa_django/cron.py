"""Cron expressions and fire times: validation, and which fires are due (decision 013).

Pure functions over aware datetimes, no I/O: the scheduler passes the database clock in.
Expressions have 5 fields (minute ... day-of-week) or 6 (seconds first), parsed by
`cronsim` (Debian cron's semantics). The DST rule, written once here:

- a schedule at a fixed wall-clock time (neither the minute nor the hour field starts with
  `*`) is evaluated on the wall clock: a time that does not exist on a spring-forward day
  fires once at the first valid minute after the gap (02:30 -> 03:00); a time that occurs
  twice on a fall-back day fires once, at its first occurrence;
- any other schedule (`*/15 * * * *`, `0 * * * *`, every second) runs on elapsed time:
  it fires in both repeated hours and not in the skipped one;
- whatever the expression, each fire is strictly later than the one before it.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from awa_django.exceptions import InvalidSchedule

UTC = dt.UTC
MAX_NAME_CHARS = 200
# catch_up enqueues at most this many missed fires per pass; the rest follow next pass.
CATCH_UP_PER_PASS = 100


class MissedFirePolicy(enum.StrEnum):
    """What a schedule does with the fires it missed (`missed_before`): no leader evaluated
    it in time, or it was paused. Fires a healthy leader sees in time are all enqueued."""

    COALESCE = "coalesce"  # only the latest due fire
    CATCH_UP = "catch_up"  # every missed fire, in order


def check_expression(expression: object) -> str:
    """The expression, normalised to single spaces; InvalidSchedule if cronsim rejects it."""
    if not isinstance(expression, str) or len(expression.split()) not in (5, 6):
        raise InvalidSchedule(
            f"cron expression {expression!r} must have 5 fields (minute hour day month "
            "weekday) or 6 (seconds first)"
        )
    normalised = " ".join(expression.split())
    try:
        CronSim(normalised, dt.datetime(2000, 1, 1))
    except (CronSimError, ValueError) as exc:
        raise InvalidSchedule(f"cron expression {expression!r} is invalid: {exc}") from None
    return normalised


def check_timezone(name: object) -> ZoneInfo:
    """The IANA zone `name` ("Europe/Berlin", "UTC"); InvalidSchedule if unknown."""
    if not isinstance(name, str) or not name:
        raise InvalidSchedule(f"timezone must be an IANA zone name, got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown timezone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from None


def check_policy(policy: object) -> MissedFirePolicy:
    if isinstance(policy, str) and policy in MissedFirePolicy:
        return MissedFirePolicy(policy)
    choices = ", ".join(repr(p.value) for p in MissedFirePolicy)
    raise InvalidSchedule(f"missed_fire_policy must be one of {choices}, got {policy!r}")


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise InvalidSchedule(
            f"a schedule name is a non-empty string of at most {MAX_NAME_CHARS} characters, "
            f"got {name!r}"
        )
    return name


# -- fire times ---------------------------------------------------------------------------
def next_fire_after(expression: str, zone: ZoneInfo, after: dt.datetime) -> dt.datetime | None:
    """The first fire strictly after `after` (None: none within cronsim's 50 years)."""
    return next(_forward(expression, zone, after), None)


def missed_before(
    now: dt.datetime, window: dt.timedelta, resumed_at: dt.datetime | None
) -> dt.datetime:
    """Fires at or before the instant returned were *missed*: older than `window` (one cron
    pass plus the grace) at `now`, or due before the schedule was last resumed (due while it
    was paused). docs/cron.md, decision 034."""
    horizon = now - window
    return horizon if resumed_at is None else max(horizon, resumed_at)


def due_fires(
    expression: str,
    zone: ZoneInfo,
    after: dt.datetime,
    now: dt.datetime,
    policy: MissedFirePolicy,
    *,
    missed: dt.datetime,
    limit: int = CATCH_UP_PER_PASS,
) -> list[dt.datetime]:
    """The fires to enqueue now, oldest first: those owed in (`after`, `now`].

    `after` is the last fire (or, for a schedule that never fired, when it was first
    synced: a new schedule does not back-fill); a fire at or before `missed` was missed
    (`missed_before`). While the oldest owed fire is not missed (a healthy leader, however
    late its pass), every owed fire is enqueued, whatever the policy. Once it is (an
    outage, a pause), the policy decides: coalesce, the latest owed fire only; catch_up,
    every one. Either way at most `limit` per pass, the rest on the next.
    """
    first = next_fire_after(expression, zone, after)
    if first is None or first > now:
        return []
    if policy is MissedFirePolicy.COALESCE and first <= missed:
        # One backwards step, so a month-long outage of a per-second schedule costs one
        # computation, not a walk over 2.6 million fires.
        latest = _latest_at_or_before(expression, zone, now)
        return [latest] if latest is not None and latest > after else []
    fires: list[dt.datetime] = []
    for fire in _forward(expression, zone, after):
        if fire > now or len(fires) >= limit:
            break
        fires.append(fire)
    return fires


def upcoming_fire(
    expression: str,
    timezone: str,
    policy: str,
    last_fire_at: dt.datetime | None,
    created_at: dt.datetime,
    now: dt.datetime,
) -> dt.datetime | None:
    """The next fire the leader will enqueue for an unpaused schedule, as operators see it:
    with catch_up, the oldest fire still owed (maybe past); otherwise the first after now.
    None for a definition this process cannot evaluate."""
    try:
        expression, zone = check_expression(expression), check_timezone(timezone)
    except InvalidSchedule:
        return None
    after = last_fire_at or created_at
    if policy != MissedFirePolicy.CATCH_UP:
        after = max(after, now)
    return next_fire_after(expression, zone, after)


def _fixed_time(expression: str) -> bool:
    """Minute and hour both fixed: evaluated on the wall clock (the DST rule above)."""
    minute, hour = expression.split()[-5:-3]
    return not minute.startswith("*") and not hour.startswith("*")


def _forward(expression: str, zone: ZoneInfo, after: dt.datetime) -> Iterator[dt.datetime]:
    local = after.astimezone(zone)
    if _fixed_time(expression):
        # Naive wall-clock iteration, then each wall time mapped to one instant.
        instants = (_instant(w, zone) for w in CronSim(expression, local.replace(tzinfo=None)))
    else:
        instants = (fire.astimezone(zone) for fire in CronSim(expression, local))
    # The guard that makes "never twice" hold whatever the wall clock does: a fire is
    # strictly later than the last one (a gap maps 02:30 and 03:00 to one instant).
    return (fire for fire in instants if fire > after)


def _latest_at_or_before(expression: str, zone: ZoneInfo, now: dt.datetime) -> dt.datetime | None:
    # microsecond=1 makes cronsim's reverse iteration include `now`'s whole second.
    local = now.astimezone(zone).replace(microsecond=1)
    if _fixed_time(expression):
        candidates = (
            _instant(w, zone) for w in CronSim(expression, local.replace(tzinfo=None), reverse=True)
        )
    else:
        candidates = (f.astimezone(zone) for f in CronSim(expression, local, reverse=True))
    return next((fire for fire in candidates if fire <= now), None)


def _instant(wall: dt.datetime, zone: ZoneInfo) -> dt.datetime:
    """A wall-clock time in `zone` as an instant: the first occurrence of a repeated time,
    the first valid minute after a skipped one."""
    aware = wall.replace(tzinfo=zone, fold=0)
    while _imaginary(aware):
        wall += dt.timedelta(minutes=1)
        aware = wall.replace(tzinfo=zone, fold=0)
    return aware


def _imaginary(moment: dt.datetime) -> bool:
    return moment != moment.astimezone(UTC).astimezone(moment.tzinfo)
