"""`AwaBackend`: Django's `django.tasks` framework running on the awa queue (DESIGN §8),
and the wiring that lets `awa_worker` run its tasks.

A task enqueues as one awa job (kind = the function's import path) in the caller's
transaction, through `Client.enqueue_task`. The worker finds its handler through `resolve`
(registered with the registry here) and `runner.py`; a lifecycle hook there turns committed
events into `task_started` / `task_finished`. `results.py` maps rows to Django's objects.

    TASKS = {"default": {"BACKEND": "awa_django.backends.AwaBackend",
                         "QUEUES": ["default", "email"],
                         "OPTIONS": {"MAX_ATTEMPTS": 1}}}
"""

from __future__ import annotations

import dataclasses
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from asgiref.sync import sync_to_async
from django.core import checks
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from awa_django.client import Client
from awa_django.conf import MAX_MAX_ATTEMPTS, MIN_MAX_ATTEMPTS, QUEUE_NAME_RE, awa_settings
from awa_django.exceptions import (
    InvalidEnqueueOption,
    InvalidQueueName,
    JobNotFound,
    PayloadTooLarge,
    SerializationError,
)
from awa_django.registry import HookRegistration, JobDefinition, registry
from awa_django.snapshot import JobSnapshot
from awa_django.tasks import runner
from awa_django.tasks.framework import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_backends,
    task_enqueued,
)
from awa_django.tasks.results import (
    awa_priority,
    import_task,
    result_from_row,
    task_for_row,
)

# Django's contract: a task that raises is FAILED, so tasks are not retried unless their
# backend's OPTIONS or the task itself ask for more attempts (docs/django-tasks.md).
TASK_DEFAULT_MAX_ATTEMPTS = 1
_OPTIONS = {"MAX_ATTEMPTS", "DATABASE"}
_MAX_JOB_ID = 2**63 - 1

# Task is generic in django-stubs only; Django's class cannot be subscripted at runtime.
if TYPE_CHECKING:
    _Task = Task[..., Any]
else:
    _Task = Task


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AwaTask(_Task):
    """A `django.tasks.Task` with awa's extra option; `@task(max_attempts=5)` builds one
    when the task's backend is an `AwaBackend`. None means the backend's MAX_ATTEMPTS."""

    max_attempts: int | None = None


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
            self.options.get("MAX_ATTEMPTS", TASK_DEFAULT_MAX_ATTEMPTS),
            f"TASKS[{alias!r}] OPTIONS",
        )
        self.database: str | None = self.options.get("DATABASE")
        install()

    # -- enqueue ------------------------------------------------------------------------
    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        max_attempts = getattr(task, "max_attempts", None)
        if max_attempts is not None:
            _check_max_attempts(max_attempts, f"task {task.module_path}", InvalidTask)

    def enqueue[**P, R](self, task: Task[P, R], args: Any, kwargs: Any) -> TaskResult[P, R]:
        """Insert one job in the caller's transaction; `task_enqueued` is sent on commit."""
        self.validate_task(task)
        client = Client(self.database)
        row = self._insert(client, task, _json_args(task, args), _json_args(task, kwargs))
        result = result_from_row(row, task, self.alias)
        send = partial(task_enqueued.send, type(self), task_result=result)
        transaction.on_commit(send, using=client.using)
        # AwaTaskResult is typed as the result of any task (Django's class is not generic at
        # runtime); this one is the result of `task`.
        return cast("TaskResult[P, R]", result)

    def _insert(self, client: Client, task: Task[..., Any], args: Any, kwargs: Any) -> JobSnapshot:
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):  # only possible with USE_TZ=False
            run_at = timezone.make_aware(run_at)
        marker = {"backend": self.alias, "run_after": run_at.isoformat() if run_at else None}
        try:
            return client.enqueue_task(
                {"args": args, "kwargs": kwargs},
                kind=task.module_path,
                django_task=marker,
                queue=task.queue_name,
                priority=awa_priority(task.priority),
                run_at=run_at,
                max_attempts=getattr(task, "max_attempts", None) or self.max_attempts,
            )
        except (InvalidQueueName, InvalidEnqueueOption) as exc:  # e.g. a 300-char module path
            raise InvalidTask(str(exc)) from exc
        except (SerializationError, PayloadTooLarge) as exc:
            raise ValueError(f"cannot enqueue task {task.module_path}: {exc}") from exc

    # -- results ------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult[..., Any]:
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

    # -- cancel (awa's; Django's backends have no cancel verb yet) ----------------------
    def cancel(self, result_id: str) -> bool:
        """Cancel the task if it has not finished: True if this call cancelled it, False if
        it had already finished (it keeps its outcome). Its status becomes FAILED; a
        running attempt's outcome is discarded. TaskResultDoesNotExist for an unknown id.

            if not default_task_backend.cancel(result.id): ...  # or result.cancel()
        """
        job_id = _job_id(result_id)
        self.get_result(result_id)  # TaskResultDoesNotExist for another job or none
        return Client(self.database).cancel(job_id) is not None

    async def acancel(self, result_id: str) -> bool:
        """`cancel` for async code."""
        return await sync_to_async(self.cancel)(result_id)

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
    if isinstance(value, bool) or not isinstance(value, int):
        value = None
    if value is None or not MIN_MAX_ATTEMPTS <= value <= MAX_MAX_ATTEMPTS:
        raise error(
            f"{where}: max_attempts must be a whole number from {MIN_MAX_ATTEMPTS} to "
            f"{MAX_MAX_ATTEMPTS}, got {value!r}"
        )
    return value


def _json_args(task: Task[..., Any], values: Any) -> Any:
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


# -- running tasks in awa_worker -------------------------------------------------------------
def awa_configured() -> bool:
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
    if task is None or not awa_configured():
        return None
    max_attempts = getattr(task, "max_attempts", None) or TASK_DEFAULT_MAX_ATTEMPTS
    return runner.definition_for(task, max_attempts)


_install_lock = threading.Lock()


def install() -> None:
    """Register the django.tasks resolver and signal hook (idempotent). Called when an
    AwaBackend is created and from `AwaConfig.ready()`, so a fresh worker sends
    `task_started` for its very first task."""
    if not awa_configured():
        return
    with _install_lock:
        registry.add_resolver(resolve)
        if not any(h.hook is runner.send_task_signal for h in registry.hooks()):
            registry.add_hook(
                HookRegistration(
                    None,
                    runner.send_task_signal,
                    runner.SIGNAL_EVENTS,
                    None,
                    applies_to=runner.is_task_kind,
                )
            )


# Registered on import, before any TASKS check: resolve() itself checks the settings
# at call time, so override_settings(TASKS=...) in tests works too.
registry.add_resolver(resolve)
