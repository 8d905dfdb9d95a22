"""Flow-control values a queue carries: its rate limit and its share of a worker's
capacity, and their validation (settings, `Client.set_queue_limits`, the admin form).

A leaf: the settings and the client both check limits with these functions, so a bad value
gets the same words wherever it is given (docs/flow-control.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RATE_SCOPES = ("global", "local")
# Bounds that fit the override columns (PositiveIntegerField) with room to spare.
MAX_CONCURRENCY = 100_000
MAX_BURST = 1_000_000
DEFAULT_RATE_SCOPE = "global"


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `rate` claims per second on average, `burst` at once after an idle spell."""

    rate: float
    burst: int

    def __str__(self) -> str:
        return f"{self.rate:g}/s burst {self.burst}"


def rate_limit(value: object) -> RateLimit:
    """`(rate, burst)`, a RateLimit, or a bare rate (burst = max(1, ceil(rate)), as Awa).

    Raises ValueError with the rule broken; callers wrap it in their own error type."""
    if isinstance(value, RateLimit):
        value = (value.rate, value.burst)
    if isinstance(value, int | float) and _is_number(value):
        value = (value, max(1, math.ceil(value)))
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError(
            f"a rate limit is (jobs per second, burst) such as (50, 10), got {value!r:.100}"
        )
    rate, burst = value
    if not (_is_number(rate) and rate > 0):
        raise ValueError(f"the rate must be a number of jobs per second > 0, got {rate!r:.50}")
    if not (_is_int(burst) and 1 <= burst <= MAX_BURST):
        raise ValueError(f"the burst must be a whole number 1..{MAX_BURST}, got {burst!r:.50}")
    return RateLimit(float(rate), int(burst))


def concurrency(value: object) -> int:
    """A concurrency (slots of one queue in one worker process): a whole number >= 1."""
    if not (isinstance(value, int) and _is_int(value) and 1 <= value <= MAX_CONCURRENCY):
        raise ValueError(
            f"concurrency must be a whole number 1..{MAX_CONCURRENCY}, got {value!r:.50}"
        )
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
