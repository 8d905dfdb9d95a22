"""Lifecycle events: frozen records of a committed state change (DESIGN §7, ADR-015)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from awa_django.snapshot import JobSnapshot


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every lifecycle event. `job` is the post-transition row; `args` is the
    decoded args dataclass for typed hooks, the raw dict for untyped ones."""

    job: JobSnapshot
    args: Any = None


@dataclass(frozen=True, slots=True)
class Started(Event):
    """The claim committed; the handler is about to run (dispatched detached)."""


@dataclass(frozen=True, slots=True)
class WaitingForCallback(Event):
    """The handler parked the job in `waiting_external`."""


@dataclass(frozen=True, slots=True)
class Completed(Event):
    """The job completed. `duration` is handler time (zero when a callback completed it)."""

    duration: timedelta = timedelta(0)


@dataclass(frozen=True, slots=True)
class Retried(Event):
    """The attempt failed and the job is `retryable` until `next_run_at`."""

    error: str = ""
    attempt: int = 0
    next_run_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Exhausted(Event):
    """The job failed for good (terminal error or attempts used up)."""

    error: str = ""
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class Cancelled(Event):
    """The job was cancelled (by its handler or through the Client)."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Rescued(Event):
    """Maintenance rescued the job: `stale_heartbeat`, `deadline_exceeded` or
    `expired_callback`."""

    reason: str = ""


ALL_EVENTS: frozenset[type[Event]] = frozenset(
    {Started, WaitingForCallback, Completed, Retried, Exhausted, Cancelled, Rescued}
)
