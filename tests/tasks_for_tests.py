"""Module-level django.tasks task functions that the backend and parity tests enqueue.

They are declared for the "default" TASKS alias; tests swap that alias's backend with
`override_settings(TASKS=...)`, and the backend is looked up again at enqueue time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from awa_django.tasks.backend import AwaTask
from awa_django.tasks.framework import TaskContext, task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task()
def noop() -> None:
    return None


@task()
def fail(message: str) -> None:
    raise ValueError(message)


@task()
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(takes_context=True)
def describe_context(context: TaskContext[Any, Any], label: str) -> dict[str, Any]:
    return {
        "label": label,
        "attempt": context.attempt,
        "id": context.task_result.id,
        "status": str(context.task_result.status),
    }


@task()
def text_of(size: int) -> str:
    return "x" * size


@task()
def unserialisable_result() -> Any:
    return {1, 2, 3}


@task()
def enqueue_add(a: int, b: int) -> str:
    """Enqueues a follow-up task, so drain() must run jobs that handlers enqueue."""
    return add.enqueue(a, b).id


def awa_task(**options: Any) -> Callable[[Callable[..., Any]], AwaTask]:
    """`@task(max_attempts=...)` needs an AwaBackend configured when this module is
    imported; the test settings may use another backend then, so build the AwaTask here."""

    def declare(func: Callable[..., Any]) -> AwaTask:
        # Django 6.0's Task has no defaults for these (6.1 and the backport do).
        defaults = {"priority": 0, "backend": "default", "queue_name": "default"}
        return AwaTask(func=func, run_after=None, **{**defaults, **options})

    return declare


@awa_task(takes_context=True, max_attempts=2)
def flaky(context: TaskContext[Any, Any]) -> int:
    """Fails on its first attempt, succeeds on the second."""
    if context.attempt < 2:
        raise ConnectionError(f"attempt {context.attempt} failed")
    return context.attempt


RUN_ORDER: list[str] = []


@task()
def record(label: str) -> str:
    """Appends `label` to RUN_ORDER, so a test can see the order tasks ran in."""
    RUN_ORDER.append(label)
    return label
