"""Post-commit delivery of lifecycle events to registered hooks (DESIGN §7, decision 004).

Callers hand an event here only after its transition committed, in the one process that
made the transition. Matching hooks (kind hooks and `on_any_event` hooks, interleaved in
registration order) run one after another; one that raises is logged with the job id and
the next still runs. A typed hook whose args type does not fit the stored args is skipped
with a warning. Delivery is best-effort and in-process: nothing here is durable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
from collections.abc import Awaitable
from concurrent.futures import Executor
from typing import Any

from django.db import close_old_connections

from awa_django.codec import decode_args
from awa_django.events import Event
from awa_django.registry import HookRegistration, Registry, registry

logger = logging.getLogger("awa_django.hooks")


def _event_for(registration: HookRegistration, event: Event) -> Event | None:
    """The event as this hook sees it: typed hooks get `args` decoded from the snapshot."""
    if registration.args_type is None:
        return dataclasses.replace(event, args=event.job.args)
    try:
        args = decode_args(registration.args_type, event.job.args)
    except Exception as exc:  # InvalidJobArgs, or the dataclass's own __post_init__ checks
        logger.warning(
            "skipping lifecycle hook %s for %s of job %s (kind %s): %s",
            _name(registration),
            type(event).__name__,
            event.job.id,
            event.job.kind,
            exc,
        )
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


def _is_async(hook: Any) -> bool:
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
        type(hook).__call__  # an object whose __call__ is async
    )


def _call_in_thread(hook: Any, event: Event) -> Any:
    """A sync hook on the runtime's behalf: it may use the ORM, so the thread's stale or
    broken connections are cleaned up afterwards, as Django does around a request."""
    try:
        return hook(event)
    finally:
        close_old_connections()


async def adispatch(
    event: Event, hooks: Registry = registry, threads: Executor | None = None
) -> None:
    """Run every matching hook for `event` (the runtime's path): async hooks are awaited on
    the loop, sync hooks run in `threads` (the loop's default executor if None) so they
    never block the loop."""
    for registration in hooks.hooks_for(event.job.kind, type(event)):
        seen = _event_for(registration, event)
        if seen is None:
            continue
        try:
            if _is_async(registration.hook):
                await registration.hook(seen)
            else:
                result = await asyncio.get_running_loop().run_in_executor(
                    threads, _call_in_thread, registration.hook, seen
                )
                if inspect.isawaitable(result):
                    await result
        except Exception:
            _log_failure(registration, event)


def dispatch(event: Event, hooks: Registry = registry) -> None:
    """Synchronous delivery, for the client side (a web request, an admin action): each
    hook has finished when this returns. Async hooks run to completion on a private loop."""
    for registration in hooks.hooks_for(event.job.kind, type(event)):
        seen = _event_for(registration, event)
        if seen is None:
            continue
        try:
            result: Any = registration.hook(seen)
            if inspect.isawaitable(result):
                _run_to_completion(result)
        except Exception:
            _log_failure(registration, event)


def _run_to_completion(awaitable: Awaitable[Any]) -> Any:
    """Await `awaitable` from sync code. If this thread already runs an event loop (sync
    code called straight from async code), asyncio.run() would refuse, so use a thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(awaitable))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _await(awaitable)).result()


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
