"""Percentiles of one run and medians over runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99 (and min/max) in milliseconds of latencies given in seconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "p50_ms": _round(percentile(ms, 50)),
        "p95_ms": _round(percentile(ms, 95)),
        "p99_ms": _round(percentile(ms, 99)),
        "min_ms": _round(min(ms)) if ms else None,
        "max_ms": _round(max(ms)) if ms else None,
    }


def summarize(scenario: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary line: the median over runs of every numeric field."""
    summary: dict[str, Any] = {"scenario": scenario, "summary": "median", "runs": len(runs)}
    keys = [k for k in runs[0] if k not in ("scenario", "run")]
    for key in keys:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if values and not any(isinstance(r.get(key), bool) for r in runs):
            summary[key] = _round(statistics.median(values))
        else:
            summary[key] = runs[0].get(key)
    return summary


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
