"""Lifecycle events: frozen records of a committed state change (DESIGN §7, ADR-015).

`Event[T]` is generic in its args: a hook registered with `on_event(SendReceipt, hook)`
receives `Event[SendReceipt]`, whose `args` is a `SendReceipt`. An unparameterised `Event`
is `Event[Any]` (untyped hooks get the stored dict).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic

from awa_django.snapshot import JobSnapshot

if TYPE_CHECKING:
    # A default of Any (PEP 696) keeps a bare `Event` meaning `Event[Any]`, and lets the
    # runtime build events before any hook decoded their args. typing.TypeVar takes
    # `default` only from Python 3.13, so the runtime (3.12+) uses a plain TypeVar.
    from typing_extensions import TypeVar

    T = TypeVar("T", default=Any)
else:
    from typing import TypeVar

    T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Event(Generic[T]):
    """Base of every lifecycle event. `job` is the post-transition row; `args` is the
    decoded args dataclass for typed hooks, the raw dict for untyped ones."""

    job: JobSnapshot
    # None until dispatch hands the event to a hook with its args decoded.
    args: T = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Started(Event[T]):
    """The claim committed; the handler is about to run (dispatched detached)."""


@dataclass(frozen=True, slots=True)
class WaitingForCallback(Event[T]):
    """The handler parked the job in `waiting_external`."""


@dataclass(frozen=True, slots=True)
class Completed(Event[T]):
    """The job completed. `duration` is handler time (zero when a callback completed it)."""

    duration: timedelta = timedelta(0)


@dataclass(frozen=True, slots=True)
class Retried(Event[T]):
    """The attempt failed and the job is `retryable` until `next_run_at`."""

    error: str = ""
    attempt: int = 0
    next_run_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Exhausted(Event[T]):
    """The job failed for good (terminal error or attempts used up). `dead_lettered`: its
    queue has `"dead_letter": True`, so the job moved to the dead letters instead of staying
    `failed` among the jobs (`job` is its row as it left, state `failed`). `reason`: set
    when maintenance rescued its last attempt (`stale_heartbeat`, `deadline_exceeded`,
    `expired_callback`; no `Rescued` fires then, decision 035), else empty."""

    error: str = ""
    attempt: int = 0
    dead_lettered: bool = False
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Cancelled(Event[T]):
    """The job was cancelled (by its handler or through the Client)."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Rescued(Event[T]):
    """Maintenance rescued the job and it will retry (`retryable`): `stale_heartbeat`,
    `deadline_exceeded` or `expired_callback`. A rescue of the last attempt fires
    `Exhausted` with that reason instead (decision 035)."""

    reason: str = ""


ALL_EVENTS: frozenset[type[Event[Any]]] = frozenset(
    {Started, WaitingForCallback, Completed, Retried, Exhausted, Cancelled, Rescued}
)
