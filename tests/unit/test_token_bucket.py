"""The rate limit's token bucket (worker/token_bucket.py): pure arithmetic, the time is an
argument. The global bucket's statement obeys the same rule (integration/test_flow_control)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django.limits import RateLimit, rate_limit
from awa_django.worker.token_bucket import TokenBucket


def test_starts_full_then_grants_at_the_rate() -> None:
    bucket = TokenBucket(RateLimit(10, 5), now=0.0)
    assert bucket.take(8, 0.0).granted == 5  # the burst
    empty = bucket.take(8, 0.0)
    assert empty.granted == 0
    assert empty.wait == pytest.approx(0.1)  # the next token is due in 1 / rate
    assert bucket.take(8, 0.35).granted == 3  # 3.5 tokens refilled, whole ones granted
    assert bucket.take(1, 0.35).wait == pytest.approx(0.05)  # the half token left


def test_refill_is_capped_at_the_burst_and_given_back_tokens_too() -> None:
    bucket = TokenBucket(RateLimit(100, 4), now=0.0)
    assert bucket.take(10, 60.0).granted == 4
    bucket.give_back(10)
    assert bucket.tokens == 4


def test_a_clock_stepping_back_mints_nothing() -> None:
    bucket = TokenBucket(RateLimit(10, 2), now=5.0)
    bucket.take(2, 5.0)
    assert bucket.take(1, 1.0).granted == 0
    assert bucket.take(1, 5.05).granted == 0  # time lost backwards is not re-counted


def test_retune_keeps_held_tokens_within_the_new_burst() -> None:
    bucket = TokenBucket(RateLimit(10, 10), now=0.0)
    bucket.retune(RateLimit(1, 3))
    assert bucket.take(10, 0.0).granted == 3
    assert bucket.take(1, 0.5).wait == pytest.approx(0.5)


@given(
    rate=st.floats(0.1, 1000),
    burst=st.integers(1, 100),
    steps=st.lists(
        st.tuples(st.floats(0, 2), st.integers(0, 200), st.integers(0, 200)), max_size=60
    ),
)
def test_used_tokens_never_exceed_rate_times_elapsed_plus_burst(
    rate: float, burst: int, steps: list[tuple[float, int, int]]
) -> None:
    """Whatever the takes, the gaps and the tokens handed back unused, the tokens used in
    [0, t] stay within rate x t + burst, and a wait always ends with a token due."""
    bucket = TokenBucket(RateLimit(rate, burst), now=0.0)
    now, used = 0.0, 0
    for gap, wanted, unused in steps:
        now += gap
        grant = bucket.take(wanted, now)
        assert 0 <= grant.granted <= wanted
        back = min(unused, grant.granted)
        bucket.give_back(back)
        used += grant.granted - back
        assert used <= rate * now + burst + 1e-6
        if grant.granted < wanted:  # probed on a copy: the probe must not move the clock
            assert copy.deepcopy(bucket).take(1, now + grant.wait + 1e-9).granted == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [((50, 10), RateLimit(50.0, 10)), ([0.5, 1], RateLimit(0.5, 1)), (2.5, RateLimit(2.5, 3))],
)
def test_rate_limit_values(value: object, expected: RateLimit) -> None:
    assert rate_limit(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ((0, 1), "rate must be"),
        ((float("inf"), 1), "rate must be"),
        ((5, 0), "burst must be"),
        ((5, 1.5), "burst must be"),
        ((True, 1), "rate must be"),
        ("50/s", "a rate limit is"),
        ((1, 2, 3), "a rate limit is"),
    ],
)
def test_rate_limit_mistakes_say_what_is_wrong(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rate_limit(value)
