"""Unit tests of `awa_django.worker.database.Backoff`, the reconnect loops' back-off."""

from __future__ import annotations

from awa_django.worker.database import Backoff


def test_delays_double_up_to_the_cap_with_jitter() -> None:
    backoff = Backoff(first=0.1, cap=5.0)
    for failures in range(1, 12):
        base = min(5.0, 0.1 * 2 ** (failures - 1))
        assert base / 2 <= backoff.next_delay() <= base


def test_a_long_outage_keeps_the_delay_at_the_cap() -> None:
    # 2**1024 overflows a float: the delay once raised OverflowError past 1024 failures.
    backoff = Backoff(first=0.5, cap=10.0)
    delays = [backoff.next_delay() for _ in range(5000)]
    assert all(5.0 <= delay <= 10.0 for delay in delays[10:])


def test_reset_starts_again_from_the_first_delay() -> None:
    backoff = Backoff(first=0.1, cap=5.0)
    for _ in range(2000):
        backoff.next_delay()
    backoff.reset()
    assert 0.05 <= backoff.next_delay() <= 0.1
