"""`AwaBackend`: Django's `django.tasks` framework running on the awa queue (DESIGN §8).

A task enqueues as one awa job (kind = the function's import path) in the caller's
transaction. `awa_worker` finds its handler through the resolver in `task_runner.py`, and
a lifecycle hook there turns committed events into `task_started` / `task_finished`.

    TASKS = {"default": {"BACKEND": "awa_django.backends.AwaBackend",
                         "QUEUES": ["default", "email"],
                         "OPTIONS": {"MAX_ATTEMPTS": 1}}}
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import re
from datetime import datetime
from functools import partial
from typing import Any

from django.core import checks
from django.db import transaction
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import (
    TASK_REFRESH_ATTRS,
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from awa_django.client.client import Client
from awa_django.conf import QUEUE_NAME_RE, awa_settings
from awa_django.exceptions import (
    AwaError,
    InvalidQueueName,
    JobNotFound,
    PayloadTooLarge,
    SerializationError,
    UnknownJobKind,
)
from awa_django.snapshot import JobSnapshot
from awa_django.states import JobState

logger = logging.getLogger("awa_django.backends")

# Job metadata key that marks a job as a django.tasks task and names its backend alias.
TASK_METADATA_KEY = "django_task"
DEFAULT_MAX_ATTEMPTS = 1  # Django's contract: a task that raises is FAILED (decision 001 doc)
_OPTIONS = {"MAX_ATTEMPTS", "DATABASE"}
_MAX_JOB_ID = 2**63 - 1

STATUS_FOR_STATE: dict[str, TaskResultStatus] = {
    JobState.SCHEDULED: TaskResultStatus.READY,
    JobState.AVAILABLE: TaskResultStatus.READY,
    JobState.RETRYABLE: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.WAITING_EXTERNAL: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


def awa_priority(django_priority: int) -> int:
    """Django's -100…100 (larger runs sooner) as our order (lower runs first): 2 - p.
    The map is its own inverse; see docs/decisions/001-priority-mapping.md."""
    return 2 - django_priority


django_priority = awa_priority  # 2 - q: the same involution read the other way


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AwaTask(Task):
    """A `django.tasks.Task` with awa's extra option; `@task(max_attempts=5)` builds one
    when the task's backend is an `AwaBackend`. None means the backend's MAX_ATTEMPTS."""

    max_attempts: int | None = None


# django-stubs declares TaskResult non-frozen; at runtime it is frozen like this one.
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AwaTaskResult(TaskResult):  # type: ignore[misc]
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

    def _refresh_from(self, fresh: TaskResult) -> None:
        for attr in (*TASK_REFRESH_ATTRS, "attempt_count"):
            object.__setattr__(self, attr, getattr(fresh, attr))


class AwaBackend(BaseTaskBackend):
    """Enqueues tasks as awa jobs; `awa_worker` runs them. OPTIONS: MAX_ATTEMPTS (default
    1: Django tasks are not retried unless asked), DATABASE (default `AWA["DATABASE"]`)."""

    task_class = AwaTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - _OPTIONS
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown key(s) {sorted(unknown)}; "
                f"AwaBackend accepts {sorted(_OPTIONS)}."
            )
        self.max_attempts = _check_max_attempts(
            self.options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS), f"TASKS[{alias!r}] OPTIONS"
        )
        self.database: str | None = self.options.get("DATABASE")
        from awa_django.tasks.runner import install

        install()

    # -- enqueue ------------------------------------------------------------------------
    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        max_attempts = getattr(task, "max_attempts", None)
        if max_attempts is not None:
            _check_max_attempts(max_attempts, f"task {task.module_path}", InvalidTask)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Insert one job in the caller's transaction; `task_enqueued` is sent on commit."""
        self.validate_task(task)
        client = Client(self.database)
        row = self._insert(client, task, _json_args(task, args), _json_args(task, kwargs))
        result = result_from_row(row, task, self.alias)
        send = partial(task_enqueued.send, type(self), task_result=result)
        transaction.on_commit(send, using=client.using)
        return result

    def _insert(self, client: Client, task: Task, args: Any, kwargs: Any) -> JobSnapshot:
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):  # only possible with USE_TZ=False
            run_at = timezone.make_aware(run_at)
        marker = {"backend": self.alias, "run_after": run_at.isoformat() if run_at else None}
        try:
            return client.enqueue(
                {"args": args, "kwargs": kwargs},
                kind=task.module_path,
                queue=task.queue_name,
                priority=awa_priority(task.priority),
                run_at=run_at,
                max_attempts=getattr(task, "max_attempts", None) or self.max_attempts,
                metadata={TASK_METADATA_KEY: marker},
            )
        except InvalidQueueName as exc:
            raise InvalidTask(str(exc)) from exc
        except (SerializationError, PayloadTooLarge) as exc:
            raise ValueError(f"cannot enqueue task {task.module_path}: {exc}") from exc

    # -- results ------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult:
        """The task's current result; TaskResultDoesNotExist for an unknown id."""
        job_id = _job_id(result_id)
        try:
            row = Client(self.database).get_job(job_id)
        except JobNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        task = task_for_row(row)
        if task is None:
            raise TaskResultDoesNotExist(f"job {result_id} ({row.kind}) is not a django task")
        return result_from_row(row, task, self.alias)

    # -- checks -------------------------------------------------------------------------
    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        served = set(awa_settings().queues)
        problems: list[checks.CheckMessage] = []
        for queue in sorted(self.queues):
            if not QUEUE_NAME_RE.match(queue):
                problems.append(_bad_queue_name(self.alias, queue))
            elif queue not in served:
                problems.append(_unserved_queue(self.alias, queue))
        return problems


def _check_max_attempts(
    value: object, where: str, error: type[Exception] = InvalidTaskBackend
) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise error(f"{where}: max_attempts must be a whole number from 1 to 1000, got {value!r}")
    return value


def _json_args(task: Task, values: Any) -> Any:
    """Django's own JSON normalisation (tuples → lists), with its TypeError / ValueError."""
    try:
        return normalize_json(values)
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"arguments of task {task.module_path} must be JSON-serialisable: {exc}"
        ) from exc


def _job_id(result_id: object) -> int:
    text = str(result_id)
    if not text.isdigit() or int(text) > _MAX_JOB_ID:
        raise TaskResultDoesNotExist(result_id)
    return int(text)


def _bad_queue_name(alias: str, queue: str) -> checks.CheckMessage:
    return checks.Error(
        f"TASKS[{alias!r}] queue {queue!r} is not a valid awa queue name.",
        hint="Use 1-200 characters of letters, digits, '_', '-', '.' and ':'.",
        id="awa.E101",
    )


def _unserved_queue(alias: str, queue: str) -> checks.CheckMessage:
    return checks.Warning(
        f"TASKS[{alias!r}] queue {queue!r} is not in AWA['QUEUES'], so no awa_worker "
        "dispatcher serves it and its tasks would wait forever.",
        hint=f'Add it: AWA = {{"QUEUES": {{..., "{queue}": {{"concurrency": 10}}}}}}.',
        id="awa.W101",
    )


# -- rows ⇄ Django's task objects ---------------------------------------------------------
def import_task(kind: str) -> Task | None:
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


def task_for_row(row: JobSnapshot) -> Task | None:
    """The task as it was enqueued: the declared one with the row's queue, priority,
    backend and run_after (falling back to the declaration if those no longer validate)."""
    declared = import_task(row.kind)
    if declared is None:
        return None
    marker = _marker(row) or {}
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


def result_from_row(row: JobSnapshot, task: Task, alias: str) -> AwaTaskResult:
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
    """One `errors` entry as Django's TaskError; the whole text is kept as the traceback."""
    text = str(entry.get("error", ""))
    # Entries written since 0.2 name the exception class in their own `type` key; older
    # ones (and runtime messages such as "hard deadline exceeded") are parsed from the text.
    kind = entry.get("type")
    path = kind if isinstance(kind, str) and kind else exception_path(text)
    return TaskError(exception_class_path=path, traceback=text)


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


def _marker(row: JobSnapshot) -> dict[str, Any] | None:
    marker = row.metadata.get(TASK_METADATA_KEY) if isinstance(row.metadata, dict) else None
    return marker if isinstance(marker, dict) else None
