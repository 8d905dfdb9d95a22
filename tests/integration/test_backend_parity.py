"""One scenario table run against Django's ImmediateBackend / DummyBackend and AwaBackend:
where Django's backends define the behaviour, ours must be observably the same."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from awa_django.tasks import framework
from awa_django.tasks.framework import (
    InvalidTask,
    Task,
    TaskResult,
    TaskResultStatus,
    task,
    task_enqueued,
    task_finished,
    task_started,
)
from awa_django.testing import drain
from tests import tasks_for_tests as t

QUEUES = ["default", "email"]
BACKENDS = {
    "immediate": f"{framework.BACKENDS}.immediate.ImmediateBackend",
    "dummy": f"{framework.BACKENDS}.dummy.DummyBackend",
    "awa": "awa_django.backends.AwaBackend",
}
ALL_FIELDS = frozenset(
    {"status", "value", "errors", "attempts", "args", "kwargs", "finished", "stamped"}
)


def use_backend(settings: Any, name: str) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKENDS[name], "QUEUES": QUEUES}}
    settings.AWA = {"QUEUES": {q: {"concurrency": 2} for q in QUEUES}}


def run_to_completion(
    name: str, enqueue: Callable[[], TaskResult[..., Any]]
) -> TaskResult[..., Any]:
    """Immediate runs at enqueue; awa runs on drain() and is read back."""
    result = enqueue()
    if name == "awa":
        assert drain() >= 1
        result.refresh()
    return result


def observe(result: TaskResult[..., Any], fields: frozenset[str]) -> dict[str, Any]:
    """What a caller can see of a finished task, with its own id masked."""
    value = result.return_value if result.status == TaskResultStatus.SUCCESSFUL else None
    if isinstance(value, dict) and value.get("id") == result.id:
        value = {**value, "id": "<own id>"}
    seen = {
        "status": str(result.status),
        "value": value,
        "errors": [(e.exception_class_path, "boom" in e.traceback) for e in result.errors],
        "attempts": (result.attempts, len(result.worker_ids)),
        "args": result.args,
        "kwargs": result.kwargs,
        "finished": result.is_finished,
        "stamped": all(
            (result.enqueued_at, result.started_at, result.last_attempted_at, result.finished_at)
        ),
    }
    return {k: v for k, v in seen.items() if k in fields}


@dataclass(frozen=True)
class Scenario:
    name: str
    enqueue: Callable[[], TaskResult[..., Any]]
    fields: frozenset[str] = ALL_FIELDS


SCENARIOS = [
    Scenario("returns a value", lambda: t.add.enqueue(2, 3)),
    Scenario("returns None", lambda: t.noop.enqueue()),
    Scenario("normalises JSON args", lambda: t.echo.enqueue(1, (2, 3), k={"a": (4,)})),
    Scenario("raises", lambda: t.fail.enqueue("boom")),
    Scenario("async", lambda: t.async_add.enqueue(20, 22)),
    Scenario("takes context", lambda: t.describe_context.enqueue("hi")),
    Scenario("other queue and priority", lambda: t.add.using(queue_name="email").enqueue(1, 1)),
    Scenario("highest priority", lambda: t.add.using(priority=100).enqueue(1, 1)),
    # Immediate fails with the TypeError itself, awa with a TerminalError naming it.
    Scenario(
        "non-JSON return value",
        lambda: t.unserialisable_result.enqueue(),
        frozenset({"status", "value", "attempts", "finished", "stamped"}),
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_awa_finishes_like_immediate(settings: Any, scenario: Scenario) -> None:
    observed = {}
    for name in ("immediate", "awa"):
        use_backend(settings, name)
        observed[name] = observe(run_to_completion(name, scenario.enqueue), scenario.fields)

    assert observed["awa"] == observed["immediate"]


def ready_view(result: TaskResult[..., Any]) -> dict[str, Any]:
    return {
        "status": str(result.status),
        "args": result.args,
        "kwargs": result.kwargs,
        "task": (result.task.func, result.task.priority, result.task.queue_name),
        "run_after": result.task.run_after,
        "attempts": result.attempts,
        "worker_ids": result.worker_ids,
        "errors": result.errors,
        "times": (result.started_at, result.last_attempted_at, result.finished_at),
        "enqueued": result.enqueued_at is not None,
    }


LATER = timezone.now() + timedelta(days=1)

QUEUED = [
    lambda: t.add.enqueue(1, 2),
    lambda: t.echo.using(priority=-40, queue_name="email").enqueue(x=[1, 2]),
    lambda: t.add.using(run_after=LATER).enqueue(1, 2),
]


@pytest.mark.django_db
@pytest.mark.parametrize("enqueue", QUEUED, ids=["plain", "priority and queue", "run_after"])
def test_awa_queues_like_dummy(settings: Any, enqueue: Callable[[], TaskResult[..., Any]]) -> None:
    views = {}
    for name in ("dummy", "awa"):
        use_backend(settings, name)
        result = enqueue()
        fetched = result.task.get_result(result.id)
        assert ready_view(fetched) == ready_view(result)
        views[name] = ready_view(fetched)

    assert views["awa"] == views["dummy"]


def inner_task() -> Task[..., Any]:
    def inner() -> None: ...

    return task(inner)


INVALID: list[tuple[str, Callable[[], Any], type[Exception]]] = [
    ("non-JSON argument", lambda: t.echo.enqueue(object()), TypeError),
    ("undecodable bytes", lambda: t.echo.enqueue(b"\xff"), ValueError),
    ("priority above 100", lambda: t.add.using(priority=101), InvalidTask),
    ("priority below -100", lambda: t.add.using(priority=-101), InvalidTask),
    ("unknown queue", lambda: t.add.using(queue_name="reports"), InvalidTask),
    ("function not at module level", inner_task, InvalidTask),
    ("context without context argument", lambda: task(takes_context=True)(t.add.func), InvalidTask),
    ("naive run_after", lambda: t.add.using(run_after=LATER.replace(tzinfo=None)), InvalidTask),
]


@pytest.mark.django_db
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize(("case", "call", "error"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_input_raises_the_same_django_exception(
    settings: Any, backend: str, case: str, call: Callable[[], Any], error: type[Exception]
) -> None:
    use_backend(settings, backend)

    with pytest.raises(error):
        call()


@pytest.fixture
def signal_names() -> Iterator[list[tuple[str, str]]]:
    received: list[tuple[str, str]] = []
    pairs = [("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished)]
    receivers = []
    for name, signal in pairs:

        def receiver(sender: Any, task_result: Any, _name: str = name, **kw: Any) -> None:
            received.append((_name, str(task_result.status)))

        signal.connect(receiver, weak=False)
        receivers.append((signal, receiver))
    yield received
    for signal, receiver in receivers:
        signal.disconnect(receiver)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("enqueue", [lambda: t.add.enqueue(1, 2), lambda: t.fail.enqueue("boom")])
def test_signals_match_immediate(
    settings: Any, signal_names: list[tuple[str, str]], enqueue: Callable[[], TaskResult[..., Any]]
) -> None:
    sequences = {}
    for name in ("immediate", "awa"):
        use_backend(settings, name)
        signal_names.clear()
        run_to_completion(name, enqueue)
        sequences[name] = list(signal_names)

    assert sequences["awa"] == sequences["immediate"]
    assert [s for s, _ in sequences["awa"]] == ["enqueued", "started", "finished"]


@pytest.mark.django_db(transaction=True)
def test_enqueue_signal_matches_dummy(settings: Any, signal_names: list[tuple[str, str]]) -> None:
    sequences = {}
    for name in ("dummy", "awa"):
        use_backend(settings, name)
        signal_names.clear()
        t.add.enqueue(1, 2)
        sequences[name] = list(signal_names)

    assert sequences["awa"] == sequences["dummy"] == [("enqueued", "READY")]


@pytest.mark.django_db
def test_a_failed_task_stores_its_traceback_like_immediate(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    tracebacks = {}
    for name in ("immediate", "awa"):
        use_backend(settings, name)
        with caplog.at_level(logging.ERROR, logger="awa_django"):
            result = run_to_completion(name, lambda: t.fail.enqueue("boom"))
        [error] = result.errors
        tracebacks[name] = error.traceback

    for text in tracebacks.values():  # what traceback.format_exception printed, whole
        assert text.startswith("Traceback (most recent call last):\n")
        assert text.endswith("    raise ValueError(message)\nValueError: boom\n")
    # The awa worker's own frames sit above the task's; from the task's frame on, the same.
    awa, immediate = tracebacks["awa"], tracebacks["immediate"]
    task_frame = 'tasks_for_tests.py", line '
    assert awa[awa.index(task_frame) :] == immediate[immediate.index(task_frame) :]
    # A failure for good is logged at ERROR with the whole trace (Django's logs say so).
    [record] = [r for r in caplog.records if r.name.startswith("awa_django")]
    assert record.levelno == logging.ERROR and "failed for good" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ValueError
