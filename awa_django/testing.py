"""Test helpers for users (STYLE §13): run enqueued jobs inline, assert what was enqueued,
capture lifecycle events. See docs/testing.md.

    def test_checkout(db):
        checkout(order)
        assert_enqueued(SendReceipt, order_id=order.id)
        assert drain() == 1
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet

from awa_django.conf import awa_settings
from awa_django.events import ALL_EVENTS, Event
from awa_django.registry import HookRegistration, kind_for, registry
from awa_django.states import WAITING_STATES, JobState
from awa_django.storage.models import Job

if TYPE_CHECKING:  # django.tasks is optional on Django 5.2 (awa_django.tasks.framework)
    from awa_django.tasks.framework import Task

__all__ = [
    "CapturedEvents",
    "assert_enqueued",
    "assert_not_enqueued",
    "capture_events",
    "drain",
    "enqueued_jobs",
]

DRAIN_LIMIT = 10_000
_LISTED = 20

# What names a job kind here: a `@job` class, a kind string, or a django.tasks Task.
type KindSpec = type | str | Task[..., Any]


# -- drain --------------------------------------------------------------------------------
def drain(queue: str | None = None, *, using: str | None = None, limit: int = DRAIN_LIMIT) -> int:
    """Run every job that is due, inline in the calling thread, until none is left; return
    how many attempts ran.

    Due means available now, or scheduled/retryable with a `run_at` already past (drain
    promotes those first, as the worker's leader would). Like the leader, it announces
    `Cancelled` for the workflow children a parent's failure cancelled (decision 046).
    Jobs a handler enqueues are run too. A job due in the future is left alone. Raises
    AssertionError once more than `limit` attempts would run: something keeps
    re-enqueueing or snoozing with no delay.
    """
    # The runtime is imported only when used.
    from awa_django.execution.inline import announce_owed, run_available

    using = using or awa_settings().database
    total = 0
    while True:
        _promote_due(using)
        # Children cancelled since the last round (a parent cancelled through the Client).
        announce_owed(using=using)
        if total >= limit:
            if _available(queue, using).exists():
                raise AssertionError(
                    f"drain() ran {total} attempts and jobs keep becoming due: does a "
                    "handler snooze or retry with no delay, or enqueue jobs without end?"
                )
            return total
        ran = run_available(queue, using=using, limit=limit - total)
        if ran == 0:
            return total
        total += ran


def _available(queue: str | None, using: str) -> QuerySet[Job]:
    jobs = Job.objects.using(using).filter(state=JobState.AVAILABLE)
    return jobs if queue is None else jobs.filter(queue=queue)


def _promote_due(using: str) -> None:
    from awa_django.execution.inline import promote_due

    promote_due(using=using)


# -- assertions ---------------------------------------------------------------------------
def enqueued_jobs(
    kind: KindSpec | None = None, *, queue: str | None = None, using: str | None = None
) -> list[Job]:
    """Jobs still waiting to run (`WAITING_STATES`), oldest first."""
    db = using or awa_settings().database
    jobs = Job.objects.using(db).filter(state__in=WAITING_STATES).order_by("id")
    if kind is not None:
        jobs = jobs.filter(kind=_kind(kind))
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    return list(jobs)


def assert_enqueued(
    kind: KindSpec,
    *,
    queue: str | None = None,
    count: int | None = None,
    using: str | None = None,
    **fields: Any,
) -> list[Job]:
    """Assert that a waiting job of this kind (an args dataclass, a kind string, or a
    django task) exists whose args have these field values; return the matches.

    With `count`, exactly that many must match. The AssertionError lists what is enqueued.
    """
    matches = _matching(kind, queue, using, fields)
    if (count is None and not matches) or (count is not None and len(matches) != count):
        wanted = "a" if count is None else f"exactly {count}"
        raise AssertionError(
            f"expected {wanted} {_describe(kind, queue, fields)}, found "
            f"{len(matches)}.\n{_listing(using)}"
        )
    return matches


def assert_not_enqueued(
    kind: KindSpec, *, queue: str | None = None, using: str | None = None, **fields: Any
) -> None:
    """Assert that no waiting job of this kind (with these args fields) exists."""
    matches = _matching(kind, queue, using, fields)
    if matches:
        raise AssertionError(
            f"expected no {_describe(kind, queue, fields)}, found {len(matches)}.\n"
            f"{_listing(using)}"
        )


def _kind(kind: KindSpec) -> str:
    if isinstance(kind, str):
        return kind
    if isinstance(kind, type):
        return kind_for(kind)
    return kind.module_path  # a django.tasks Task


def _matching(
    kind: KindSpec, queue: str | None, using: str | None, fields: dict[str, Any]
) -> list[Job]:
    expected = {name: _as_json(value) for name, value in fields.items()}
    return [
        job
        for job in enqueued_jobs(kind, queue=queue, using=using)
        if isinstance(job.args, dict)
        and all(name in job.args and job.args[name] == value for name, value in expected.items())
    ]


def _as_json(value: Any) -> Any:
    """What `value` looks like once stored (tuples become lists, dataclasses dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value


def _describe(kind: KindSpec, queue: str | None, fields: dict[str, Any]) -> str:
    parts = [f"{_kind(kind)!r} job"]
    if queue is not None:
        parts.append(f"on queue {queue!r}")
    if fields:
        parts.append("with " + ", ".join(f"{k}={v!r}" for k, v in fields.items()))
    return " ".join(parts)


def _listing(using: str | None) -> str:
    jobs = enqueued_jobs(using=using)
    if not jobs:
        return "Nothing is enqueued."
    lines = [
        f"  #{j.id} {j.kind} queue={j.queue} state={j.state} args={j.args!r:.200}"
        for j in jobs[:_LISTED]
    ]
    more = f"\n  ... and {len(jobs) - _LISTED} more" if len(jobs) > _LISTED else ""
    return "Enqueued:\n" + "\n".join(lines) + more


# -- events -------------------------------------------------------------------------------
class CapturedEvents:
    """The lifecycle events dispatched while `capture_events()` was active, in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def record(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def of_type(self, *types: type[Event]) -> list[Event]:
        return [e for e in self.events if isinstance(e, types)]

    def for_kind(self, kind: KindSpec) -> list[Event]:
        name = _kind(kind)
        return [e for e in self.events if e.job.kind == name]

    def names(self) -> list[str]:
        """Event class names in dispatch order, e.g. ["Started", "Completed"]."""
        return [type(e).__name__ for e in self.events]

    def __iter__(self) -> Iterator[Event]:
        return iter(list(self.events))

    def __len__(self) -> int:
        return len(self.events)


@contextmanager
def capture_events() -> Iterator[CapturedEvents]:
    """Collect every lifecycle event dispatched inside the block (any kind, any event).

    Events are dispatched after the transition commits: in a test wrapped in a
    transaction, client-side events (Client.cancel) wait for on_commit, so use
    `django_capture_on_commit_callbacks(execute=True)` or a transactional test.
    """
    captured = CapturedEvents()
    registration = HookRegistration(None, captured.record, ALL_EVENTS, None)
    registry.add_hook(registration)
    try:
        yield captured
    finally:
        registry.remove_hook(registration)
