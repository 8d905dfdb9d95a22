"""Runs django.tasks tasks inside awa: the registry resolver that turns a task's import
path into a handler, and the lifecycle hook that sends Django's task signals after each
committed event. `AwaBackend` (backends.py) is the enqueue/result side."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any

from django.tasks import task_backends
from django.tasks.base import Task, TaskContext
from django.tasks.exceptions import InvalidTaskBackend
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from awa_django.codec import dumps
from awa_django.conf import awa_settings
from awa_django.events import Cancelled, Completed, Event, Exhausted, Started
from awa_django.exceptions import PayloadTooLarge, SerializationError, TerminalError
from awa_django.execution.context import JobContext
from awa_django.registry import HookRegistration, JobDefinition, registry
from awa_django.tasks.backend import (
    DEFAULT_MAX_ATTEMPTS,
    AwaBackend,
    _marker,
    awa_priority,
    import_task,
    result_from_row,
    task_for_row,
)

logger = logging.getLogger("awa_django.backends")


def _awa_configured() -> bool:
    """True when some TASKS alias uses an AwaBackend (only then do we run task kinds)."""
    for params in task_backends.settings.values():
        try:
            backend = import_string(params.get("BACKEND", ""))
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, AwaBackend):
            return True
    return False


def resolve(kind: str) -> JobDefinition | None:
    """Registry resolver: a handler for a kind that names a module-level django task."""
    task = import_task(kind)
    if task is None or not _awa_configured():
        return None
    handler = _async_handler(task) if iscoroutinefunction(task.func) else _sync_handler(task)
    max_attempts = getattr(task, "max_attempts", None) or DEFAULT_MAX_ATTEMPTS
    return JobDefinition(
        kind, None, handler, task.queue_name, max_attempts, awa_priority(task.priority)
    )


def _call_args(task: Task, job: JobContext[Any]) -> tuple[list[Any], dict[str, Any]]:
    payload = job.args if isinstance(job.args, dict) else {}
    args = list(payload.get("args", []))
    if task.takes_context:
        bound = task_for_row(job.row) or task
        alias = (_marker(job.row) or {}).get("backend") or task.backend
        args.insert(0, TaskContext(task_result=result_from_row(job.row, bound, alias)))
    return args, dict(payload.get("kwargs", {}))


def _sync_handler(task: Task) -> Callable[[JobContext[Any]], None]:
    def run_task(job: JobContext[Any]) -> None:
        args, kwargs = _call_args(task, job)
        job.result = checked_return_value(task, task.func(*args, **kwargs))

    return run_task


def _async_handler(task: Task) -> Callable[[JobContext[Any]], Any]:
    async def run_task(job: JobContext[Any]) -> None:
        args, kwargs = _call_args(task, job)
        job.result = checked_return_value(task, await task.func(*args, **kwargs))

    return run_task


def checked_return_value(task: Task, value: Any) -> Any:
    """The JSON form of a task's return value; TerminalError (the job fails, its error
    says why) when it is not JSON or is larger than AWA["MAX_RESULT_BYTES"]."""
    limit = awa_settings().max_result_bytes
    what = f"return value of task {task.module_path}"
    try:
        normalized = normalize_json(value)
        dumps(normalized, what=what, limit=limit)
    except (TypeError, ValueError, SerializationError) as exc:
        raise TerminalError(f"{what} must be JSON-serialisable: {exc}") from exc
    except PayloadTooLarge as exc:
        raise TerminalError(f'{exc} (AWA["MAX_RESULT_BYTES"])') from exc
    return normalized


_SIGNALS = {
    Started: task_started,
    Completed: task_finished,
    Exhausted: task_finished,
    Cancelled: task_finished,
}


def is_task_kind(kind: str) -> bool:
    """Task kinds are import paths; `@job` kinds are snake_case words without dots."""
    return "." in kind


def send_task_signal(event: Event) -> None:
    """Lifecycle hook: Started ⇒ task_started; Completed/Exhausted/Cancelled ⇒
    task_finished. Retried sends nothing: the task is still pending (READY).

    Sync on purpose: receivers may use the ORM, which refuses to run inside an event loop.
    """
    if _marker(event.job) is not None:  # cheap filter first: most jobs are not tasks
        _send_for(event)


def _send_for(event: Event) -> None:
    row = event.job
    task = task_for_row(row)
    alias = (_marker(row) or {}).get("backend", "")
    if task is None:
        return
    try:
        sender = type(task_backends[alias])
    except InvalidTaskBackend:
        logger.warning("job %s names task backend %r, which is not in TASKS", row.id, alias)
        return
    _SIGNALS[type(event)].send(sender, task_result=result_from_row(row, task, alias))


_install_lock = threading.Lock()


def install() -> None:
    """Register the django.tasks resolver and signal hook (idempotent). Called when an
    AwaBackend is created and from `AwaConfig.ready()`, so a fresh worker sends
    `task_started` for its very first task."""
    if not _awa_configured():
        return
    with _install_lock:
        registry.add_resolver(resolve)
        if not any(h.hook is send_task_signal for h in registry.hooks()):
            events = frozenset(_SIGNALS)
            registry.add_hook(
                HookRegistration(None, send_task_signal, events, None, applies_to=is_task_kind)
            )


# Registered on import, before any TASKS check: resolve() itself checks the settings
# at call time, so override_settings(TASKS=...) in tests works too.
registry.add_resolver(resolve)
