"""The django.tasks backend against real PostgreSQL: enqueue, validation, priority,
run_after, execution through drain(), results, errors and Django's task signals."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import django
import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from awa_django import Client
from awa_django.registry import registry
from awa_django.storage.models import Job
from awa_django.tasks.backend import AwaBackend, AwaTask, resolve
from awa_django.tasks.framework import (
    BACKENDS,
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from awa_django.tasks.results import awa_priority, exception_path
from awa_django.testing import drain
from tests import tasks_for_tests as t
from tests.factories import JobFactory

AWA_TASKS = {
    "default": {
        "BACKEND": "awa_django.backends.AwaBackend",
        "QUEUES": ["default", "email"],
    }
}
AWA = {"QUEUES": {"default": {"concurrency": 2}, "email": {"concurrency": 2}}}


@pytest.fixture
def backend(settings: Any) -> AwaBackend:
    settings.TASKS = AWA_TASKS
    settings.AWA = AWA
    found = task_backends["default"]
    assert isinstance(found, AwaBackend)
    return found


@pytest.fixture
def signals() -> Iterator[list[tuple[str, str, str]]]:
    """(signal name, task result id, status) for every task signal sent."""
    received: list[tuple[str, str, str]] = []
    receivers = {}
    for name, signal in {
        "enqueued": task_enqueued,
        "started": task_started,
        "finished": task_finished,
    }.items():

        def receiver(sender: Any, task_result: Any, _name: str = name, **kwargs: Any) -> None:
            received.append((_name, task_result.id, str(task_result.status)))

        receivers[name] = (signal, receiver)
        signal.connect(receiver, weak=False)
    yield received
    for signal, receiver in receivers.values():
        signal.disconnect(receiver)


def job_of(result: Any) -> Job:
    return Job.objects.get(id=int(result.id))


def skip_backoff(result: Any) -> None:
    """Make a retryable job due. Far in the past on purpose: inside a test's transaction
    PostgreSQL's now() is the transaction's start time."""
    Job.objects.filter(id=int(result.id)).update(run_at=timezone.now() - timedelta(hours=1))


# -- enqueue --------------------------------------------------------------------------------
@pytest.mark.django_db
def test_enqueue_inserts_one_ready_job(backend: AwaBackend) -> None:
    result = t.add.enqueue(1, b=2)

    job = job_of(result)
    assert (job.kind, job.queue, job.state) == ("tests.tasks_for_tests.add", "default", "available")
    assert job.args == {"args": [1], "kwargs": {"b": 2}}
    assert (job.priority, job.max_attempts) == (2, 1)
    # The task marker has its own internal column; the user-visible metadata stays empty.
    assert job.django_task == {"backend": "default", "run_after": None}
    assert job.metadata == {}
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at == job.created_at
    assert (result.args, result.kwargs, result.backend) == ([1], {"b": 2}, "default")
    assert not result.is_finished and result.attempts == 0 and result.worker_ids == []
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


@pytest.mark.django_db
def test_get_result_of_a_waiting_task_matches_the_enqueue_result(backend: AwaBackend) -> None:
    result = t.echo.using(queue_name="email", priority=7).enqueue("a", (1, 2), k=None)

    fetched = t.echo.get_result(result.id)

    assert fetched.status == TaskResultStatus.READY
    assert (fetched.args, fetched.kwargs) == (["a", [1, 2]], {"k": None})
    assert (fetched.task.queue_name, fetched.task.priority) == ("email", 7)
    assert fetched.task.func is t.echo.func
    assert fetched.enqueued_at == result.enqueued_at


@pytest.mark.django_db
@pytest.mark.parametrize("result_id", ["987654321", "not-a-number", str(2**64), "-1", ""])
def test_unknown_result_id_raises_does_not_exist(backend: AwaBackend, result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(result_id)


@pytest.mark.django_db
def test_a_job_that_is_not_a_task_is_not_a_result(backend: AwaBackend) -> None:
    job: Any = JobFactory(kind="send_receipt")

    with pytest.raises(TaskResultDoesNotExist, match="not a django task"):
        backend.get_result(str(job.id))


@pytest.mark.django_db
def test_get_result_through_another_task_raises_mismatch(backend: AwaBackend) -> None:
    result = t.add.enqueue(1, 2)

    with pytest.raises(TaskResultMismatch):
        t.noop.get_result(result.id)


@pytest.mark.django_db
def test_async_enqueue_and_get_result(backend: AwaBackend) -> None:
    result = async_to_sync(t.add.aenqueue)(4, 5)

    fetched = async_to_sync(t.add.aget_result)(result.id)

    assert (fetched.id, fetched.status, fetched.args) == (result.id, TaskResultStatus.READY, [4, 5])


# -- validation (Django's exception types) ----------------------------------------------------
@pytest.mark.django_db
def test_function_not_at_module_level_is_invalid(backend: AwaBackend) -> None:
    def inner() -> None: ...

    with pytest.raises(InvalidTask, match="module level"):
        task(inner)
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((object(),), TypeError, "must be JSON-serialisable: Unsupported type"),
        (({1, 2},), TypeError, "Unsupported type"),
        ((b"\xff",), ValueError, "Unsupported value"),
        ((math.nan,), ValueError, "cannot be serialised to JSON"),
        (("a\x00b",), ValueError, "NUL"),
    ],
)
def test_non_json_arguments_are_rejected(
    backend: AwaBackend, args: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        t.echo.enqueue(*args)
    with pytest.raises(error, match=message):
        t.echo.enqueue(value=args[0])
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_arguments_larger_than_the_args_limit_are_rejected(
    backend: AwaBackend, settings: Any
) -> None:
    settings.AWA = {**AWA, "MAX_ARGS_BYTES": 100}

    with pytest.raises(ValueError, match="limit is 100"):
        t.echo.enqueue("x" * 200)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_queue_not_in_queues_is_invalid(backend: AwaBackend) -> None:
    with pytest.raises(InvalidTask, match="Queue 'reports' is not valid"):
        t.add.using(queue_name="reports")


@pytest.mark.django_db
def test_queue_name_awa_cannot_store_is_invalid_task(settings: Any) -> None:
    settings.TASKS = {"default": {**AWA_TASKS["default"], "QUEUES": []}}

    with pytest.raises(InvalidTask, match="invalid queue name"):
        t.add.using(queue_name="has space").enqueue(1, 2)
    assert not Job.objects.exists()


def test_check_reports_bad_and_unserved_queues(settings: Any) -> None:
    settings.AWA = AWA
    settings.TASKS = {"default": {**AWA_TASKS["default"], "QUEUES": ["default", "a b", "slow"]}}

    messages = task_backends["default"].check()

    assert [(m.id, "a b" in m.msg or "slow" in m.msg) for m in messages] == [
        ("awa.E101", True),
        ("awa.W101", True),
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"RETRIES": 3}, "unknown key"),
        ({"MAX_ATTEMPTS": 0}, "from 1 to 1000"),
        ({"MAX_ATTEMPTS": "3"}, "from 1 to 1000"),
    ],
)
def test_bad_options_raise_invalid_task_backend(
    settings: Any, options: dict[str, Any], message: str
) -> None:
    settings.TASKS = {"default": {**AWA_TASKS["default"], "OPTIONS": options}}

    with pytest.raises(InvalidTaskBackend, match=message):
        _ = task_backends["default"]


@pytest.mark.django_db
@pytest.mark.parametrize("priority", [101, -101, 1.5])
def test_priority_outside_django_range_is_invalid(backend: AwaBackend, priority: Any) -> None:
    with pytest.raises(InvalidTask, match="priority must be a whole number"):
        t.add.using(priority=priority)


@pytest.mark.django_db
def test_naive_run_after_is_invalid(backend: AwaBackend) -> None:
    with pytest.raises(InvalidTask, match="aware datetime"):
        t.add.using(run_after=timezone.now().replace(tzinfo=None))


# -- priority -----------------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("priority", [-100, -2, -1, 0, 1, 2, 99, 100])
def test_priority_maps_exactly_and_reversibly(backend: AwaBackend, priority: int) -> None:
    result = t.add.using(priority=priority).enqueue(1, 1)

    assert job_of(result).priority == 2 - priority == awa_priority(priority)
    assert backend.get_result(result.id).task.priority == priority
    assert awa_priority(awa_priority(priority)) == priority


@pytest.mark.django_db
def test_higher_django_priority_runs_first(backend: AwaBackend) -> None:
    t.RUN_ORDER.clear()
    for label, priority in [("low", -100), ("normal", 0), ("urgent", 100), ("high", 50)]:
        t.record.using(priority=priority).enqueue(label)

    assert drain() == 4
    assert t.RUN_ORDER == ["urgent", "high", "normal", "low"]


# -- run_after ----------------------------------------------------------------------------------
@pytest.mark.django_db
def test_future_run_after_stays_ready_and_is_not_drained(backend: AwaBackend) -> None:
    when = timezone.now() + timedelta(hours=1)
    result = t.add.using(run_after=when).enqueue(1, 2)

    assert drain() == 0
    fetched = t.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY
    assert fetched.task.run_after == when
    assert (job_of(result).state, job_of(result).run_at) == ("scheduled", when)


@pytest.mark.django_db
def test_past_run_after_runs_on_drain(backend: AwaBackend) -> None:
    result = t.add.using(run_after=timezone.now() - timedelta(hours=1)).enqueue(1, 2)

    assert drain() == 1
    assert t.add.get_result(result.id).return_value == 3


# -- execution ----------------------------------------------------------------------------------
@pytest.mark.django_db
def test_round_trip_stores_the_return_value(backend: AwaBackend) -> None:
    result = t.add.enqueue(2, 3)

    assert drain() == 1
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == []
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert result.started_at is not None and result.started_at == result.last_attempted_at
    assert result.finished_at is not None and result.finished_at >= result.started_at
    assert job_of(result).result == 5


@pytest.mark.django_db
def test_async_task_runs(backend: AwaBackend) -> None:
    result = t.async_add.enqueue(20, 22)

    drain()

    # django-stubs types an async task's return value as its coroutine; it is the awaited value.
    assert t.async_add.get_result(result.id).return_value == 42  # type: ignore[comparison-overlap]


@pytest.mark.django_db
def test_task_that_takes_context_gets_its_result(backend: AwaBackend) -> None:
    result = t.describe_context.enqueue("hello")

    drain()

    value = t.describe_context.get_result(result.id).return_value
    assert value == {"label": "hello", "attempt": 1, "id": result.id, "status": "RUNNING"}


@pytest.mark.django_db
def test_tasks_enqueued_by_a_task_are_drained_too(backend: AwaBackend) -> None:
    result = t.enqueue_add.enqueue(1, 1)

    assert drain() == 2
    follow_up = t.add.get_result(t.enqueue_add.get_result(result.id).return_value)
    assert follow_up.return_value == 2


@pytest.mark.django_db
def test_exception_is_recorded_with_class_path_and_traceback(backend: AwaBackend) -> None:
    result = t.fail.enqueue("boom")

    drain()
    result.refresh()

    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at is not None
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "boom" in error.traceback and "in fail" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


@pytest.mark.django_db
def test_return_value_over_the_size_limit_fails_the_task(
    backend: AwaBackend, settings: Any
) -> None:
    settings.AWA = {**AWA, "MAX_RESULT_BYTES": 100}
    small, large = t.text_of.enqueue(90), t.text_of.enqueue(200)

    drain()

    assert t.text_of.get_result(small.id).return_value == "x" * 90
    failed = t.text_of.get_result(large.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class_path == "awa_django.exceptions.TerminalError"
    assert "MAX_RESULT_BYTES" in failed.errors[0].traceback
    assert job_of(large).result is None


@pytest.mark.django_db
def test_return_value_that_is_not_json_fails_the_task(backend: AwaBackend) -> None:
    result = t.unserialisable_result.enqueue()

    drain()

    failed = t.unserialisable_result.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert "must be JSON-serialisable" in failed.errors[0].traceback


@pytest.mark.django_db
def test_max_attempts_retries_then_succeeds(backend: AwaBackend) -> None:
    result = t.flaky.enqueue()
    assert job_of(result).max_attempts == 2

    drain()  # attempt 1 fails; the retry waits for its backoff
    waiting = t.flaky.get_result(result.id)
    assert (waiting.status, waiting.attempts, waiting.finished_at) == ("READY", 1, None)
    assert waiting.errors[0].exception_class_path == "builtins.ConnectionError"

    skip_backoff(result)
    drain()

    done = t.flaky.get_result(result.id)
    assert (done.status, done.return_value, done.attempts) == ("SUCCESSFUL", 2, 2)
    assert len(done.errors) == 1


@pytest.mark.django_db
def test_backend_max_attempts_option_applies(settings: Any) -> None:
    settings.TASKS = {"default": {**AWA_TASKS["default"], "OPTIONS": {"MAX_ATTEMPTS": 3}}}

    assert job_of(t.add.enqueue(1, 1)).max_attempts == 3
    assert job_of(t.flaky.enqueue()).max_attempts == 2  # the task's own wins


@pytest.mark.django_db
@pytest.mark.skipif(
    django.VERSION[:2] == (6, 0),
    reason="Django 6.0's @task() takes no backend options (6.1 and the backport do); "
    "docs/django-tasks.md",
)
def test_task_decorator_takes_max_attempts(backend: AwaBackend) -> None:
    # django-stubs does not know backend-specific decorator kwargs.
    declared = task(max_attempts=3, priority=5)(t.add.func)  # type: ignore[call-overload]

    assert isinstance(declared, AwaTask) and declared.max_attempts == 3
    assert job_of(declared.enqueue(1, 1)).max_attempts == 3
    for bad in (0, 1001, True, "3"):
        with pytest.raises(InvalidTask, match="max_attempts must be a whole number"):
            task(max_attempts=bad)(t.add.func)  # type: ignore[call-overload]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("scheduled", "READY"),
        ("available", "READY"),
        ("retryable", "READY"),
        ("running", "RUNNING"),
        ("waiting_external", "RUNNING"),
        ("completed", "SUCCESSFUL"),
        ("failed", "FAILED"),
        ("cancelled", "FAILED"),
    ],
)
def test_status_maps_every_job_state(backend: AwaBackend, state: str, status: str) -> None:
    job: Any = JobFactory(
        kind="tests.tasks_for_tests.add",
        args={"args": [1, 2], "kwargs": {}},
        state=state,
        django_task={"backend": "default", "run_after": None},
    )

    assert backend.get_result(str(job.id)).status == status


@pytest.mark.django_db
def test_cancelled_task_reads_failed_and_sends_task_finished(
    backend: AwaBackend,
    signals: list[tuple[str, str, str]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        result = t.add.enqueue(1, 2)
        Client().cancel(int(result.id))

    assert t.add.get_result(result.id).status == TaskResultStatus.FAILED
    assert signals == [("enqueued", result.id, "READY"), ("finished", result.id, "FAILED")]


# -- worker resolution -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind",
    [
        "tests.tasks_for_tests.does_not_exist",
        "no_such_module.task",
        "tests.tasks_for_tests.RUN_ORDER",  # importable, not a task
        "send_receipt",
    ],
)
def test_resolver_ignores_kinds_that_are_not_tasks(backend: AwaBackend, kind: str) -> None:
    assert resolve(kind) is None


def test_resolver_returns_a_handler_for_a_task(backend: AwaBackend) -> None:
    definition = registry.job("tests.tasks_for_tests.async_add")

    assert definition is not None and definition.args_type is None
    assert definition.is_async
    assert (definition.queue, definition.priority, definition.max_attempts) == ("default", 2, 1)


def test_resolver_runs_nothing_without_an_awa_backend(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": f"{BACKENDS}.dummy.DummyBackend"}}

    assert resolve("tests.tasks_for_tests.add") is None


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("ValueError: boom\nTraceback (most recent call last):\n...", "builtins.ValueError"),
        ("ValueError: ", "builtins.ValueError"),
        ("KeyError", "builtins.KeyError"),
        ("awa_django.exceptions.TerminalError: no\n...", "awa_django.exceptions.TerminalError"),
        ("shop.errors.Declined: card\n", "shop.errors.Declined"),
        ("Traceback (most recent call last):\n  ...\nshop.Boom: x\n", "shop.Boom"),
        ("unknown job kind: shop.tasks.gone", "awa_django.exceptions.UnknownJobKind"),
        ("hard deadline exceeded", "awa_django.exceptions.AwaError"),
        ("heartbeat stale: worker presumed dead", "awa_django.exceptions.AwaError"),
        ("cancelled: by handler", "awa_django.exceptions.AwaError"),
        ("NotAnException: x", "awa_django.exceptions.AwaError"),
        ("", "awa_django.exceptions.AwaError"),
    ],
)
def test_exception_path_parses_error_entries(text: str, path: str) -> None:
    assert exception_path(text) == path


# -- signals ------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_task_enqueued_is_sent_only_after_commit(
    backend: AwaBackend, signals: list[tuple[str, str, str]]
) -> None:
    with transaction.atomic():
        result = t.add.enqueue(1, 2)
        assert signals == []

    assert signals == [("enqueued", result.id, "READY")]


@pytest.mark.django_db(transaction=True)
def test_a_metadata_key_named_django_task_does_not_make_a_job_a_task(
    backend: AwaBackend, signals: list[tuple[str, str, str]]
) -> None:
    # Only the backend's own column marks a task; users' metadata is theirs.
    metadata = {"django_task": {"backend": "default", "run_after": None}}
    row = Client().enqueue(
        {"args": [1, 2], "kwargs": {}}, kind="tests.tasks_for_tests.add", metadata=metadata
    )

    drain()

    assert signals == []
    job = Job.objects.get(id=row.id)
    assert (job.state, job.metadata, job.django_task) == ("completed", metadata, None)


@pytest.mark.django_db(transaction=True)
def test_rollback_means_no_job_and_no_signal(
    backend: AwaBackend, signals: list[tuple[str, str, str]]
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        t.add.enqueue(1, 2)
        raise RuntimeError("roll back")

    assert signals == []
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_started_and_finished_are_sent_for_each_outcome(
    backend: AwaBackend, signals: list[tuple[str, str, str]]
) -> None:
    ok, bad = t.add.enqueue(1, 2), t.fail.enqueue("boom")

    drain()

    assert [s for s in signals if s[1] == ok.id] == [
        ("enqueued", ok.id, "READY"),
        ("started", ok.id, "RUNNING"),
        ("finished", ok.id, "SUCCESSFUL"),
    ]
    assert [s for s in signals if s[1] == bad.id] == [
        ("enqueued", bad.id, "READY"),
        ("started", bad.id, "RUNNING"),
        ("finished", bad.id, "FAILED"),
    ]


@pytest.mark.django_db(transaction=True)
def test_no_task_finished_while_a_retry_is_pending(
    backend: AwaBackend, signals: list[tuple[str, str, str]]
) -> None:
    result = t.flaky.enqueue()

    drain()
    assert [name for name, *_ in signals] == ["enqueued", "started"]

    skip_backoff(result)
    drain()
    assert [name for name, *_ in signals] == ["enqueued", "started", "started", "finished"]
    assert signals[-1] == ("finished", result.id, "SUCCESSFUL")


@pytest.mark.django_db(transaction=True)
def test_signals_are_not_sent_for_plain_awa_jobs(
    backend: AwaBackend, signals: list[tuple[str, str, str]]
) -> None:
    from testproject.shop.jobs import SendReceipt

    Client().enqueue(SendReceipt(order_id=1))
    drain()

    assert signals == []
