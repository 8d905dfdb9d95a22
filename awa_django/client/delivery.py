"""Hook delivery for transitions made through the `Client`: each event is dispatched once the
caller's outermost transaction commits, in this process only (DESIGN §7)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import transaction

from awa_django.events import Event
from awa_django.registry import dispatch as hooks


def dispatch_on_commit(events: Sequence[Event[Any]], using: str) -> None:
    """`robust`: the transition has committed by the time a hook runs, so a failure while
    dispatching is logged, never raised into a caller whose operation succeeded."""
    for event in events:
        transaction.on_commit(_dispatcher(event), using=using, robust=True)


def _dispatcher(event: Event[Any]) -> Callable[[], None]:
    return lambda: hooks.dispatch(event)
