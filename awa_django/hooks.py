"""Post-commit delivery of lifecycle events to registered hooks (DESIGN §7).

Callers hand an event here only after its transition committed. Hooks for one event run
sequentially in registration order; one that raises is logged and the next still runs.
Delivery is best-effort and in-process: nothing here is durable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from typing import Any

from .codec import decode_args
from .events import Event
from .exceptions import InvalidJobArgs
from .registry import HookRegistration, Registry, registry

logger = logging.getLogger("awa_django.hooks")


def _event_for(registration: HookRegistration, event: Event) -> Event | None:
    """The event as this hook sees it: typed hooks get `args` decoded from the snapshot."""
    if registration.args_type is None:
        return dataclasses.replace(event, args=event.job.args)
    try:
        args = decode_args(registration.args_type, event.job.args)
    except InvalidJobArgs as exc:
        logger.warning("skipping hook %s for job %s: %s", _name(registration), event.job.id, exc)
        return None
    return dataclasses.replace(event, args=args)


def _name(registration: HookRegistration) -> str:
    hook = registration.hook
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', hook)!s}"


def _log_failure(registration: HookRegistration, event: Event) -> None:
    logger.exception(
        "lifecycle hook %s failed on %s for job %s (kind %s)",
        _name(registration),
        type(event).__name__,
        event.job.id,
        event.job.kind,
    )


async def adispatch(event: Event, hooks: Registry = registry) -> None:
    """Run every matching hook for `event`; sync hooks run in a thread."""
    for registration in hooks.hooks_for(event.job.kind, type(event)):
        seen = _event_for(registration, event)
        if seen is None:
            continue
        try:
            if inspect.iscoroutinefunction(registration.hook):
                await registration.hook(seen)
            else:
                await asyncio.to_thread(registration.hook, seen)
        except Exception:
            _log_failure(registration, event)


def dispatch(event: Event, hooks: Registry = registry) -> None:
    """Synchronous delivery, for the client side (a web request, an admin action)."""
    for registration in hooks.hooks_for(event.job.kind, type(event)):
        seen = _event_for(registration, event)
        if seen is None:
            continue
        try:
            result: Any = registration.hook(seen)
            if inspect.isawaitable(result):
                asyncio.run(_await(result))
        except Exception:
            _log_failure(registration, event)


async def _await(awaitable: Any) -> Any:
    return await awaitable
