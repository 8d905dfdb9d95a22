"""Rows ⇄ Django's task objects, shared by the backend (enqueue, get_result) and the
runner (task context, signals): the task a row names, its TaskResult, its status, errors and
priority mapping, and the `django_task` marker the backend stores on each task's job."""

from __future__ import annotations

import builtins
import dataclasses
import logging
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from awa_django.conf import DEFAULT_PRIORITY
from awa_django.exceptions import AwaError, UnknownJobKind
from awa_django.snapshot import JobSnapshot
from awa_django.states import JobState
from awa_django.tasks.framework import (
    TASK_REFRESH_ATTRS,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
)

logger = logging.getLogger("awa_django.backends")

STATUS_FOR_STATE: dict[str, TaskResultStatus] = {
    JobState.SCHEDULED: TaskResultStatus.READY,
    # Enqueued after parents (docs/workflows.md): not started, so ready as Django means it.
    JobState.WAITING_PARENTS: TaskResultStatus.READY,
    JobState.AVAILABLE: TaskResultStatus.READY,
    JobState.RETRYABLE: TaskResultStatus.READY,
    JobState.WAITING_SLOT: TaskResultStatus.READY,  # queued behind its concurrency key
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.WAITING_EXTERNAL: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


def awa_priority(django_priority: int) -> int:
    """Django's -100…100 (larger runs sooner) as our order (lower runs first): 2 - p, so
    Django's default 0 is our default 2. The map is its own inverse; see
    docs/decisions/001-priority-mapping.md."""
    return DEFAULT_PRIORITY - django_priority


django_priority = awa_priority  # 2 - q: the same involution read the other way


# TaskResult is generic in django-stubs only; Django's class cannot be subscripted at runtime.
if TYPE_CHECKING:
    _TaskResult = TaskResult[..., Any]
else:
    _TaskResult = TaskResult


# django-stubs declares TaskResult non-frozen; at runtime it is frozen like this one.
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AwaTaskResult(_TaskResult):  # type: ignore[misc]
    """A TaskResult whose `attempts` is the job's attempt count; `worker_ids` keeps only
    the most recent ten workers, so its length would undercount long retry histories."""

    attempt_count: int = 0

    @property
    def attempts(self) -> int:
        return self.attempt_count

    def refresh(self) -> None:
        self._refresh_from(self.task.get_backend().get_result(self.id))

    async def arefresh(self) -> None:
        self._refresh_from(await self.task.get_backend().aget_result(self.id))

    def cancel(self) -> bool:
        """Cancel this task if it has not finished (`AwaBackend.cancel`), then refresh:
        True if this call cancelled it. Django's TaskResult has no cancel; awa's does."""
        cancelled: bool = self.task.get_backend().cancel(self.id)  # type: ignore[attr-defined]
        self.refresh()
        return cancelled

    async def acancel(self) -> bool:
        """`cancel` for async code."""
        backend = self.task.get_backend()
        cancelled: bool = await backend.acancel(self.id)  # type: ignore[attr-defined]
        await self.arefresh()
        return cancelled

    def _refresh_from(self, fresh: TaskResult[..., Any]) -> None:
        for attr in (*TASK_REFRESH_ATTRS, "attempt_count"):
            object.__setattr__(self, attr, getattr(fresh, attr))


def import_task(kind: str) -> Task[..., Any] | None:
    """The module-level Task whose import path is `kind`, or None."""
    if "." not in kind:
        return None
    try:
        found = import_string(kind)
    except ImportError:
        return None
    except Exception:
        logger.warning("importing task %s failed", kind, exc_info=True)
        return None
    if isinstance(found, Task) and found.module_path == kind:
        return found
    return None


def task_for_row(row: JobSnapshot) -> Task[..., Any] | None:
    """The task as it was enqueued: the declared one with the row's queue, priority,
    backend and run_after (falling back to the declaration if those no longer validate)."""
    declared = import_task(row.kind)
    if declared is None:
        return None
    marker = task_marker(row) or {}
    changes: dict[str, Any] = {
        "queue_name": row.queue,
        "priority": django_priority(row.priority),
        "backend": marker.get("backend") or declared.backend,
    }
    if marker.get("run_after"):
        changes["run_after"] = datetime.fromisoformat(marker["run_after"])
    try:
        return dataclasses.replace(declared, **changes)
    except (InvalidTask, InvalidTaskBackend):
        return declared


def result_from_row(row: JobSnapshot, task: Task[..., Any], alias: str) -> AwaTaskResult:
    """A TaskResult for the committed job `row`."""
    payload = row.args if isinstance(row.args, dict) else {}
    result = AwaTaskResult(
        task=task,
        id=str(row.id),
        status=STATUS_FOR_STATE[row.state],
        enqueued_at=row.created_at,
        started_at=row.attempted_at,
        last_attempted_at=row.attempted_at,
        finished_at=row.finalized_at if row.is_terminal else None,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=alias,
        errors=[task_error(entry) for entry in row.errors],
        worker_ids=list(row.attempted_by),
        attempt_count=row.attempt,
    )
    if row.state == JobState.COMPLETED:
        object.__setattr__(result, "_return_value", row.result)
    return result


# The worker writes "Type: message\n<traceback>" (builtins bare, others dotted); runtime
# messages such as "hard deadline exceeded" or "cancelled: reason" name no exception.
_EXCEPTION_HEAD = re.compile(r"^(?P<path>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::|$)")
_FALLBACK_PATH = f"{AwaError.__module__}.{AwaError.__qualname__}"
_UNKNOWN_KIND_PATH = f"{UnknownJobKind.__module__}.{UnknownJobKind.__qualname__}"


def task_error(entry: dict[str, Any]) -> TaskError:
    """One `errors` entry as Django's TaskError."""
    text = str(entry.get("error", ""))
    # Entries written since 0.2 name the exception class in their own `type` key; older
    # ones (and runtime messages such as "hard deadline exceeded") are parsed from the text.
    kind = entry.get("type")
    path = kind if isinstance(kind, str) and kind else exception_path(text)
    return TaskError(exception_class_path=path, traceback=django_traceback(text))


def django_traceback(text: str) -> str:
    """An error entry as Django's own backends store a traceback: what
    `traceback.format_exception` printed, without awa's `Type: message` head line (the
    trace ends with that line anyway). Entries with no trace are kept whole."""
    _, newline, trace = text.partition("\n")
    if newline and trace.startswith(_TRACE_STARTS):
        return trace
    return text


# How the trace below the head line begins: Python's header, or our mark of its cut top.
_TRACE_STARTS = ("Traceback (most recent call last):", "... (")


def exception_path(text: str) -> str:
    """The exception class path an error entry names, or a stand-in awa exception."""
    lines = [line for line in text.splitlines() if line.strip()]
    head = lines[-1] if lines and lines[0].startswith("Traceback") else (lines or [""])[0]
    match = _EXCEPTION_HEAD.match(head)
    if match:
        path = match["path"]
        if "." not in path:
            found = getattr(builtins, path, None)
            if isinstance(found, type) and issubclass(found, BaseException):
                return f"builtins.{path}"
        elif path.rpartition(".")[2][:1].isupper():
            return path
    return _UNKNOWN_KIND_PATH if text.startswith("unknown job kind") else _FALLBACK_PATH


def task_marker(row: JobSnapshot) -> dict[str, Any] | None:
    """The `django_task` marker ({"backend": alias, "run_after": iso or None}) of a job the
    backend enqueued; None for every other job. Kept in its own internal column (not in
    the user's metadata) by `Client.enqueue_task`."""
    marker = row.django_task
    return marker if isinstance(marker, dict) else None
