"""ClaimFloor: where a dispatcher's next claim starts (decision 027), on a fake clock."""

from __future__ import annotations

import datetime as dt

from awa_django.snapshot import JobSnapshot
from awa_django.worker.claim_floor import ClaimFloor

AT = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def row(job_id: int) -> JobSnapshot:
    """A claimed row of priority 2, due at AT."""
    return JobSnapshot(
        id=job_id, kind="k", queue="q", args={}, state="running", priority=2, attempt=1,
        max_attempts=25, run_at=AT, created_at=AT, attempted_at=AT, finalized_at=None,
        run_lease=1, errors=[], metadata={}, tags=[], progress=None, callback_id=None,
        callback_timeout_at=None, result=None, attempted_by=["w"],
    )  # fmt: skip


def rows(*ids: int) -> list[JobSnapshot]:
    return [row(i) for i in ids]


def test_the_first_claim_scans_the_whole_queue() -> None:
    assert ClaimFloor(clock=Clock()).start() is None


def test_a_full_claim_moves_the_floor_to_its_last_row() -> None:
    floor = ClaimFloor(clock=Clock())
    assert floor.claimed(None, rows(3, 4, 5), limit=3) is False
    assert floor.start() == (2, AT, 5)


def test_a_short_claim_from_the_floor_asks_for_a_whole_scan_at_once() -> None:
    floor = ClaimFloor(clock=Clock())
    floor.claimed(None, rows(3, 4), limit=2)
    start = floor.start()
    assert floor.claimed(start, rows(6), limit=2) is True
    assert floor.start() is None


def test_a_short_whole_scan_needs_no_second_look() -> None:
    floor = ClaimFloor(clock=Clock())
    assert floor.claimed(None, rows(3), limit=2) is False
    assert floor.claimed(None, [], limit=2) is False
    assert floor.start() is None


def test_a_whole_scan_runs_at_least_every_interval() -> None:
    clock = Clock()
    floor = ClaimFloor(interval=1.0, clock=clock)
    floor.claimed(None, rows(1, 2), limit=2)
    clock.now += 0.9
    floor.claimed(floor.start(), rows(3, 4), limit=2)
    assert floor.start() == (2, AT, 4)
    clock.now += 0.2  # 1.1 s after the last whole scan
    assert floor.start() is None


def test_reset_drops_the_floor() -> None:
    floor = ClaimFloor(clock=Clock())
    floor.claimed(None, rows(1, 2), limit=2)
    floor.reset()
    assert floor.start() is None
