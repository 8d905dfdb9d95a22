"""Django's task framework, wherever it comes from: `django.tasks` on Django 6.0+, else the
`django-tasks` backport (the `awa-django[tasks]` extra) on Django 5.2. The two have the
same classes under different module paths, and two exceptions renamed; the rest of
`awa_django.tasks` imports them from here only (decision 019).

Importing it without either raises ImportError with what to install; the `awa.E030` check
says the same when `TASKS` names AwaBackend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from awa_django.tasks import BACKPORT, BUILTIN, MISSING

# Where Django's own backends live (ImmediateBackend, DummyBackend), for TASKS settings.
BACKENDS = "django.tasks.backends" if BUILTIN else "django_tasks.backends"

if TYPE_CHECKING or BUILTIN:
    from django.tasks import task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        TASK_REFRESH_ATTRS,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
elif BACKPORT:
    from django_tasks import task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        TASK_REFRESH_ATTRS,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:
    raise ImportError(MISSING)

__all__ = [
    "BACKENDS",
    "TASK_REFRESH_ATTRS",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
