"""`AwaBackend`: Django's `django.tasks` framework running on the awa queue (DESIGN §8).

A task enqueues as one awa job (kind = the function's import path) in the caller's
transaction. `awa_worker` finds its handler through the resolver registered here, and a
lifecycle hook turns committed events into Django's `task_started` / `task_finished`.

    TASKS = {"default": {"BACKEND": "awa_django.backends.AwaBackend",
                         "QUEUES": ["default", "email"],
                         "OPTIONS": {"MAX_ATTEMPTS": 1}}}
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import re
import threading
from collections.abc import Callable
from datetime import datetime
from functools import partial
from inspect import iscoroutinefunction
from typing import Any

from django.core import checks
from django.db import transaction
from django.tasks import task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import (
    TASK_REFRESH_ATTRS,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from .client import Client
from .codec import dumps
from .conf import QUEUE_NAME_RE, awa_settings
from .context import Job
from .events import Cancelled, Completed, Event, Exhausted, Started
from .exceptions import (
    AwaError,
    InvalidQueueName,
    JobNotFound,
    PayloadTooLarge,
    SerializationError,
    TerminalError,
    UnknownJobKind,
)
from .registry import HookRegistration, JobDefinition, registry
from .snapshot import JobRow
from .states import JobState

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

    def _insert(self, client: Client, task: Task, args: Any, kwargs: Any) -> JobRow:
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


def task_for_row(row: JobRow) -> Task | None:
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


def result_from_row(row: JobRow, task: Task, alias: str) -> AwaTaskResult:
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
    return TaskError(exception_class_path=exception_path(text), traceback=text)


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


def _marker(row: JobRow) -> dict[str, Any] | None:
    marker = row.metadata.get(TASK_METADATA_KEY) if isinstance(row.metadata, dict) else None
    return marker if isinstance(marker, dict) else None


# -- the worker side: handlers and signals ------------------------------------------------
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


def _call_args(task: Task, job: Job[Any]) -> tuple[list[Any], dict[str, Any]]:
    payload = job.args if isinstance(job.args, dict) else {}
    args = list(payload.get("args", []))
    if task.takes_context:
        bound = task_for_row(job.row) or task
        alias = (_marker(job.row) or {}).get("backend") or task.backend
        args.insert(0, TaskContext(task_result=result_from_row(job.row, bound, alias)))
    return args, dict(payload.get("kwargs", {}))


def _sync_handler(task: Task) -> Callable[[Job[Any]], None]:
    def run_task(job: Job[Any]) -> None:
        args, kwargs = _call_args(task, job)
        job.result = checked_return_value(task, task.func(*args, **kwargs))

    return run_task


def _async_handler(task: Task) -> Callable[[Job[Any]], Any]:
    async def run_task(job: Job[Any]) -> None:
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


registry.add_resolver(resolve)
