"""How figures read for people, shared by the surfaces that show them: the admin (job list,
dashboard) and `awa_status`. A leaf: it imports nothing of awa_django."""

from __future__ import annotations


def format_duration(seconds: float | None) -> str:
    """Compact age for people: '42s', '3m 12s', '2h 5m', '4d 1h'; '-' for None."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def format_priority(priority: int, original: int | None) -> str:
    """`2`, or `2 (aged from 4)` while priority aging has lifted it (decision 018)."""
    return str(priority) if original is None else f"{priority} (aged from {original})"
