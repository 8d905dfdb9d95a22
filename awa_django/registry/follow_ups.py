"""The follow-up registrars: `on_completed_enqueue(ArgsType, build)` and one per outcome.

A builder is called with the job's typed args and the outcome's event (the one its hooks
will receive once the transition commits) *inside* the transaction that writes the
transition, and returns the jobs to enqueue with it: zero or more args dataclass instances,
or `awa_django.follow_up(args, **options)` for ones with their own enqueue options. They
are written in that transaction, so they exist iff the outcome committed; a stale outcome
builds nothing (docs/exactly-once.md, decision 015). Register in `AppConfig.ready()`.

    awa_django.on_completed_enqueue(
        CreateInvoice, lambda args, done: [SendInvoice(invoice_no=args.invoice_no)]
    )
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from awa_django.events import (
    Cancelled,
    Completed,
    Event,
    Exhausted,
    Rescued,
    Retried,
    WaitingForCallback,
)
from awa_django.registry import FollowUpRegistration, kind_for, registry, validate_args_type

A = TypeVar("A")
# What a builder returns: None or an iterable of args instances / `follow_up(...)`s.
Built = Iterable[Any] | None


def on_completed_enqueue(
    args_type: type[A], build: Callable[[A, Completed[A]], Built]
) -> Callable[[A, Completed[A]], Built]:
    """Enqueue what `build(args, completed)` returns with each completion of `args_type`'s
    kind (by a handler, an atomic handler, or `complete_external` & co.). Returns `build`."""
    _register(args_type, Completed, build)
    return build


def on_retried_enqueue(
    args_type: type[A], build: Callable[[A, Retried[A]], Built]
) -> Callable[[A, Retried[A]], Built]:
    """... with each retry (`Retried`: error, attempt, next_run_at). Returns `build`."""
    _register(args_type, Retried, build)
    return build


def on_exhausted_enqueue(
    args_type: type[A], build: Callable[[A, Exhausted[A]], Built]
) -> Callable[[A, Exhausted[A]], Built]:
    """... when the job fails for good (`Exhausted`: error, attempt). Returns `build`."""
    _register(args_type, Exhausted, build)
    return build


def on_cancelled_enqueue(
    args_type: type[A], build: Callable[[A, Cancelled[A]], Built]
) -> Callable[[A, Cancelled[A]], Built]:
    """... when the job is cancelled, by its handler or the Client (`Cancelled`: reason).
    Returns `build`."""
    _register(args_type, Cancelled, build)
    return build


def on_waiting_for_callback_enqueue(
    args_type: type[A], build: Callable[[A, WaitingForCallback[A]], Built]
) -> Callable[[A, WaitingForCallback[A]], Built]:
    """... when the handler parks the job on a callback (`job.callback_id` is set).
    Returns `build`."""
    _register(args_type, WaitingForCallback, build)
    return build


def on_rescued_enqueue(
    args_type: type[A], build: Callable[[A, Rescued[A]], Built]
) -> Callable[[A, Rescued[A]], Built]:
    """... when maintenance rescues the job and it will retry (`Rescued`: reason; a rescue
    of the last attempt fires `Exhausted`, decision 035). Best-effort: written right
    after the rescue commits, in a transaction of their own (decision 015). Returns
    `build`."""
    _register(args_type, Rescued, build)
    return build


def _register(args_type: type, event: type[Event[Any]], build: object) -> None:
    validate_args_type(args_type)
    if not callable(build):
        raise TypeError(f"a follow-up builder must be callable, got {build!r:.100}")
    registry.add_follow_up(FollowUpRegistration(kind_for(args_type), event, build, args_type))
