"""What operators watch over time, on the Client's side (decision 021): the per-minute
rollups the dashboard draws, per-kind figures, and the threshold check behind
`awa_status --check` (pure: figures in, breaches out).

The ORM side of storage is imported on first use, as in queues.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from awa_django.exceptions import InvalidThreshold
from awa_django.snapshot import KindFigures, QueueStats, RollupPoint

HISTORY_RANGES = {"hour": 60, "day": 24 * 60}


def history(using: str, minutes: int) -> list[RollupPoint]:
    from awa_django.storage import history as storage_history

    return storage_history.queue_history(_minutes(minutes), using=using)


def kinds(using: str, minutes: int) -> list[KindFigures]:
    from awa_django.storage import history as storage_history

    return storage_history.kind_figures(_minutes(minutes), using=using)


def outcomes(using: str, minutes: int) -> dict[str, tuple[int, int]]:
    from awa_django.storage import history as storage_history

    return storage_history.queue_outcomes(_minutes(minutes), using=using)


def states(using: str) -> dict[str, int]:
    from awa_django.storage import history as storage_history

    return storage_history.state_counts(using=using)


def _minutes(minutes: int) -> int:
    if isinstance(minutes, bool) or not isinstance(minutes, int) or minutes < 1:
        raise InvalidThreshold(f"a window is a whole number of minutes >= 1, got {minutes!r}")
    return minutes


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Limits `awa_status --check` enforces per queue; None: not checked. A failure rate
    is only judged once a queue finalized at least `min_jobs` jobs in the window."""

    max_lag_seconds: float | None = None
    max_failure_rate: float | None = None
    min_jobs: int = 1

    def __post_init__(self) -> None:
        lag, rate = self.max_lag_seconds, self.max_failure_rate
        if lag is not None and not (math.isfinite(lag) and lag >= 0):
            raise InvalidThreshold(f"the lag threshold is seconds >= 0, got {lag!r}")
        if rate is not None and not (math.isfinite(rate) and 0 <= rate <= 1):
            raise InvalidThreshold(f"the failure rate threshold is 0..1, got {rate!r}")
        if self.min_jobs < 1:
            raise InvalidThreshold(f"min_jobs is at least 1, got {self.min_jobs!r}")


@dataclass(frozen=True, slots=True)
class Breach:
    """One queue over one threshold."""

    queue: str
    measure: str  # "lag" | "failure_rate"
    value: float
    limit: float

    def __str__(self) -> str:
        if self.measure == "lag":
            return f"{self.queue}: lag {self.value:.1f}s > {self.limit:g}s"
        return f"{self.queue}: failure rate {self.value:.1%} > {self.limit:.1%}"


def breaches(
    stats: list[QueueStats], finished: dict[str, tuple[int, int]], limits: Thresholds
) -> list[Breach]:
    """Every threshold each queue passes (strictly above its limit), by queue name."""
    found: list[Breach] = []
    for queue in sorted({q.queue for q in stats} | set(finished)):
        lag = next((q.lag_seconds for q in stats if q.queue == queue), None)
        max_lag = limits.max_lag_seconds
        if max_lag is not None and lag is not None and lag > max_lag:
            found.append(Breach(queue, "lag", lag, max_lag))
        completed, failed = finished.get(queue, (0, 0))
        if limits.max_failure_rate is not None and completed + failed >= limits.min_jobs:
            rate = failed / (completed + failed)
            if rate > limits.max_failure_rate:
                found.append(Breach(queue, "failure_rate", rate, limits.max_failure_rate))
    return found
