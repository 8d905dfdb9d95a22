"""The registration API users call: `@job(...)` and the `on_event*` hook registrars.

Typed end to end: `@job(SendReceipt)` accepts only a handler that takes
`JobContext[SendReceipt]`, and `on_event(SendReceipt, hook)` only a hook that takes
`Event[SendReceipt]`, so mypy reports a handler or hook annotated with another args type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from awa_django.conf import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    validate_queue_name,
)
from awa_django.events import Event
from awa_django.exceptions import InvalidEnqueueOption, InvalidJobDeclaration
from awa_django.keys import KeyFunction, check_key_rate_limit, check_max_in_flight
from awa_django.limits import RateLimit
from awa_django.options import check_kind, check_max_attempts, check_priority
from awa_django.registry import (
    HookRegistration,
    JobDefinition,
    kind_for,
    normalize_events,
    registry,
    validate_args_type,
)
from awa_django.unique import UniqueOpts

if TYPE_CHECKING:
    from awa_django.execution.context import JobContext

A = TypeVar("A")  # the args dataclass
R = TypeVar("R")  # what the handler returns (None, RetryAfter, ..., or their coroutine)
H = TypeVar("H", bound=Callable[[Any], Any])


def job(
    args_type: type[A],
    *,
    queue: str = DEFAULT_QUEUE,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    priority: int = DEFAULT_PRIORITY,
    kind: str | None = None,
    unique: UniqueOpts | None = None,
    atomic: bool | None = None,
    concurrency_key: Callable[[A], object] | None = None,
    max_in_flight: int | None = None,
    key_rate_limit: tuple[float, int] | float | None = None,
) -> Callable[[Callable[[JobContext[A]], R]], Callable[[JobContext[A]], R]]:
    """Register the decorated function as the handler of `args_type`'s kind.

    @awa_django.job(SendReceipt, queue="email", max_attempts=5)
    def send_receipt(job: awa_django.JobContext[SendReceipt]) -> None: ...

    `queue`, `max_attempts` and `priority` are the defaults of every enqueue of this kind;
    they are checked here with the ranges enqueue applies (InvalidEnqueueOption,
    InvalidQueueName), so a bad one fails at import, not at every enqueue. `unique`
    (a UniqueOpts) makes every enqueue of this kind unique unless the call passes its own
    `unique=` (or `unique=False` to opt out).

    `atomic=True` runs a `def` handler inside `transaction.atomic()` on the job's database
    and writes its completion in that transaction: its database writes count once
    (docs/exactly-once.md). None takes the queue's `"atomic"` default. An `async def`
    handler cannot be atomic: `atomic=True` on one raises InvalidJobDeclaration.

    `concurrency_key=lambda args: args.tenant_id` gives each job a key (a str of 1 to 200
    characters or an int; None: no key): at most `max_in_flight` jobs of one key are
    available or running at once across every worker, and `key_rate_limit=(rate, burst)`
    caps how fast they start. Unset, the queue's `max_in_flight` / `key_rate_limit`
    settings apply (default 1, no rate). Enqueue may override the key with
    `concurrency_key=`. docs/flow-control.md.
    """
    validate_args_type(args_type)
    validate_queue_name(queue)
    check_max_attempts(max_attempts)
    check_priority(priority)
    if unique is not None and not isinstance(unique, UniqueOpts):
        raise InvalidEnqueueOption(f"@job(unique=...) takes a UniqueOpts, got {unique!r:.100}")
    job_kind = check_kind(kind) if kind is not None else check_kind(kind_for(args_type))
    if atomic is not None and not isinstance(atomic, bool):
        raise InvalidJobDeclaration(f"@job(atomic=...) takes True or False, got {atomic!r:.100}")
    limits = _key_limits(concurrency_key, max_in_flight, key_rate_limit)
    if kind:
        args_type.__awa_kind__ = kind  # type: ignore[attr-defined]

    def register(handler: Callable[[JobContext[A]], R]) -> Callable[[JobContext[A]], R]:
        definition = JobDefinition(
            job_kind,
            args_type,
            handler,
            queue,
            max_attempts,
            priority,
            unique,
            atomic,
            concurrency_key,
            *limits,
        )
        if atomic and definition.is_async:
            raise InvalidJobDeclaration(
                f"@job({args_type.__name__}, atomic=True) decorates the async handler "
                f"{handler.__qualname__}: Django's transaction.atomic() cannot span an async "
                "handler's awaits. Make the handler a plain `def` (the worker runs it on a "
                "thread), or drop atomic=True."
            )
        registry.add_job(definition)
        return handler

    return register


def _key_limits(
    key: KeyFunction | None, max_in_flight: object, rate: object
) -> tuple[int | None, RateLimit | None]:
    """The declared per-key limits, checked (InvalidJobDeclaration)."""
    if key is not None and not callable(key):
        raise InvalidJobDeclaration(
            f"@job(concurrency_key=...) takes a function of the args, such as "
            f"lambda args: args.tenant_id, got {key!r:.100}"
        )
    try:
        checked = None if max_in_flight is None else check_max_in_flight(max_in_flight)
        return checked, check_key_rate_limit(rate)
    except ValueError as exc:
        raise InvalidJobDeclaration(f"@job: {exc}") from None


def on_event(
    args_type: type[A],
    hook: Callable[[Event[A]], object],
    *,
    events: Iterable[type[Event[Any]]] | None = None,
) -> Callable[[Event[A]], object]:
    """Call `hook(event)` after each committed event of `args_type`'s kind; `event.args` is
    an `args_type` instance. `events` picks a subset ({Completed, Exhausted}); default all.
    Register in `AppConfig.ready()`. Returns `hook`.

    Annotate the hook's parameter as `Event[ArgsType]` and narrow with isinstance for the
    fields of one event (`if isinstance(event, Exhausted): event.error`). A hook whose
    `args_type` cannot decode a job's stored args is skipped for that event with a warning;
    the job itself is never touched by a hook.
    """
    validate_args_type(args_type)
    _check_hook(hook)
    registry.add_hook(
        HookRegistration(kind_for(args_type), hook, normalize_events(events), args_type)
    )
    return hook


def on_event_kind(kind: str, hook: H, *, events: Iterable[type[Event[Any]]] | None = None) -> H:
    """Untyped hook keyed by kind string; `event.args` is the stored dict. Returns `hook`."""
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"kind must be a non-empty string, got {kind!r}")
    _check_hook(hook)
    registry.add_hook(HookRegistration(kind, hook, normalize_events(events), None))
    return hook


def on_any_event(hook: H, *, events: Iterable[type[Event[Any]]] | None = None) -> H:
    """Untyped hook for every kind (metrics, alerting). Returns `hook`."""
    _check_hook(hook)
    registry.add_hook(HookRegistration(None, hook, normalize_events(events), None))
    return hook


def _check_hook(hook: object) -> None:
    if not callable(hook):
        raise TypeError(f"a lifecycle hook must be callable (sync or async), got {hook!r}")
