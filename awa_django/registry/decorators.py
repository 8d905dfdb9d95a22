"""The registration API users call: `@job(...)` and the `on_event*` hook registrars."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from awa_django.conf import validate_queue_name
from awa_django.events import Event
from awa_django.registry import (
    HookRegistration,
    JobDefinition,
    kind_for,
    normalize_events,
    registry,
    validate_args_type,
)

F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H", bound=Callable[[Any], Any])


def job(
    args_type: type,
    *,
    queue: str = "default",
    max_attempts: int = 25,
    priority: int = 2,
    kind: str | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as the handler of `args_type`'s kind.

    @awa_django.job(SendReceipt, queue="email", max_attempts=5)
    def send_receipt(job: awa_django.JobContext[SendReceipt]) -> None: ...
    """
    validate_args_type(args_type)
    validate_queue_name(queue)
    if not 1 <= max_attempts <= 1000:
        raise ValueError("max_attempts must be between 1 and 1000")
    job_kind = kind or kind_for(args_type)
    if kind:
        args_type.__awa_kind__ = kind  # type: ignore[attr-defined]

    def register(handler: F) -> F:
        registry.add_job(JobDefinition(job_kind, args_type, handler, queue, max_attempts, priority))
        return handler

    return register


def on_event(
    args_type: type,
    hook: H,
    *,
    events: Iterable[type[Event]] | None = None,
) -> H:
    """Call `hook(event)` after each committed event of `args_type`'s kind; `event.args` is
    an `args_type` instance. `events` picks a subset ({Completed, Exhausted}); default all.
    Register in `AppConfig.ready()`. Returns `hook`.

    A hook whose `args_type` cannot decode a job's stored args is skipped for that event
    with a warning; the job itself is never touched by a hook.
    """
    validate_args_type(args_type)
    _check_hook(hook)
    registry.add_hook(
        HookRegistration(kind_for(args_type), hook, normalize_events(events), args_type)
    )
    return hook


def on_event_kind(kind: str, hook: H, *, events: Iterable[type[Event]] | None = None) -> H:
    """Untyped hook keyed by kind string; `event.args` is the stored dict. Returns `hook`."""
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"kind must be a non-empty string, got {kind!r}")
    _check_hook(hook)
    registry.add_hook(HookRegistration(kind, hook, normalize_events(events), None))
    return hook


def on_any_event(hook: H, *, events: Iterable[type[Event]] | None = None) -> H:
    """Untyped hook for every kind (metrics, alerting). Returns `hook`."""
    _check_hook(hook)
    registry.add_hook(HookRegistration(None, hook, normalize_events(events), None))
    return hook


def _check_hook(hook: object) -> None:
    if not callable(hook):
        raise TypeError(f"a lifecycle hook must be callable (sync or async), got {hook!r}")
