"""Runs django.tasks tasks inside awa: the handler of a task's kind, and the lifecycle hook
that sends Django's task signals after each committed event. `backend.py` wires both into
the registry and is the enqueue/result side; `results.py` maps rows to Django's objects."""

from __future__ import annotations

import logging
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any

from awa_django.codec import dumps
from awa_django.conf import awa_settings
from awa_django.events import Cancelled, Completed, Event, Exhausted, Started
from awa_django.exceptions import PayloadTooLarge, SerializationError, TerminalError
from awa_django.execution.context import JobContext
from awa_django.registry import JobDefinition
from awa_django.tasks.framework import (
    InvalidTaskBackend,
    Task,
    TaskContext,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from awa_django.tasks.results import awa_priority, result_from_row, task_for_row, task_marker

logger = logging.getLogger("awa_django.backends")


def definition_for(task: Task[..., Any], max_attempts: int) -> JobDefinition:
    """The job definition that runs `task` under its import path as the kind."""
    handler = _async_handler(task) if iscoroutinefunction(task.func) else _sync_handler(task)
    return JobDefinition(
        task.module_path,
        None,
        handler,
        task.queue_name,
        max_attempts,
        awa_priority(task.priority),
    )


def _call_args(task: Task[..., Any], job: JobContext[Any]) -> tuple[list[Any], dict[str, Any]]:
    payload = job.args if isinstance(job.args, dict) else {}
    args = list(payload.get("args", []))
    if task.takes_context:
        bound = task_for_row(job.row) or task
        alias = (task_marker(job.row) or {}).get("backend") or task.backend
        args.insert(0, TaskContext(task_result=result_from_row(job.row, bound, alias)))
    return args, dict(payload.get("kwargs", {}))


def _sync_handler(task: Task[..., Any]) -> Callable[[JobContext[Any]], None]:
    def run_task(job: JobContext[Any]) -> None:
        args, kwargs = _call_args(task, job)
        job.result = checked_return_value(task, task.func(*args, **kwargs))

    return run_task


def _async_handler(task: Task[..., Any]) -> Callable[[JobContext[Any]], Any]:
    async def run_task(job: JobContext[Any]) -> None:
        args, kwargs = _call_args(task, job)
        job.result = checked_return_value(task, await task.func(*args, **kwargs))

    return run_task


def checked_return_value(task: Task[..., Any], value: Any) -> Any:
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


_SIGNALS: dict[type[Event[Any]], Any] = {
    Started: task_started,
    Completed: task_finished,
    Exhausted: task_finished,
    Cancelled: task_finished,
}
SIGNAL_EVENTS: frozenset[type[Event[Any]]] = frozenset(_SIGNALS)


def is_task_kind(kind: str) -> bool:
    """Task kinds are import paths; `@job` kinds are snake_case words without dots."""
    return "." in kind


def send_task_signal(event: Event) -> None:
    """Lifecycle hook: Started ⇒ task_started; Completed/Exhausted/Cancelled ⇒
    task_finished. Retried sends nothing: the task is still pending (READY).

    Sync on purpose: receivers may use the ORM, which refuses to run inside an event loop.
    """
    if task_marker(event.job) is not None:  # cheap filter first: most jobs are not tasks
        _send_for(event)


def _send_for(event: Event) -> None:
    row = event.job
    task = task_for_row(row)
    alias = (task_marker(row) or {}).get("backend", "")
    if task is None:
        return
    try:
        sender = type(task_backends[alias])
    except InvalidTaskBackend:
        logger.warning("job %s names task backend %r, which is not in TASKS", row.id, alias)
        return
    _SIGNALS[type(event)].send(sender, task_result=result_from_row(row, task, alias))
