"""Cancelling django.tasks results on awa (Django's backends have no cancel verb, so this is
awa's: `AwaBackend.cancel` / `acancel` and `AwaTaskResult.cancel` / `acancel`), and the
async API end to end: aenqueue, aget_result, arefresh, acancel."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

import tests.tasks_for_tests as t
from awa_django.tasks.backend import AwaBackend
from awa_django.tasks.framework import TaskResultDoesNotExist, TaskResultStatus
from awa_django.testing import drain
from tests.factories import JobFactory
from tests.integration.test_backend import backend, job_of, signals

__all__ = ["backend", "signals"]  # fixtures, imported to be found

pytestmark = pytest.mark.django_db


def test_cancelling_a_waiting_task_fails_it_and_sends_task_finished(
    backend: AwaBackend, signals: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    result = t.add.enqueue(1, 2)

    with django_capture_on_commit_callbacks(execute=True):
        assert backend.cancel(result.id) is True

    assert job_of(result).state == "cancelled"
    fresh = backend.get_result(result.id)
    assert fresh.status == TaskResultStatus.FAILED and fresh.is_finished
    assert ("finished", result.id, "FAILED") in signals
    assert drain() == 0  # never runs


def test_the_result_cancels_itself_and_refreshes(backend: AwaBackend) -> None:
    result = t.add.enqueue(1, 2)

    assert result.cancel() is True  # type: ignore[attr-defined]

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_a_finished_task_keeps_its_outcome(backend: AwaBackend) -> None:
    result = t.add.enqueue(2, 3)
    drain()

    assert backend.cancel(result.id) is False
    assert result.cancel() is False  # type: ignore[attr-defined]
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 5)


@pytest.mark.parametrize("result_id", ["999999999", "nope", "-1"])
def test_cancelling_an_unknown_result_raises_does_not_exist(
    backend: AwaBackend, result_id: str
) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        backend.cancel(result_id)


def test_cancel_refuses_a_job_that_is_not_a_task(backend: AwaBackend) -> None:
    job = JobFactory()
    with pytest.raises(TaskResultDoesNotExist):
        backend.cancel(str(job.id))
    job.refresh_from_db()
    assert job.state == "available"


def test_the_async_api_enqueues_reads_refreshes_and_cancels(backend: AwaBackend) -> None:
    async def scenario() -> tuple[Any, ...]:
        result = await t.add.aenqueue(4, 5)
        fetched = await t.add.aget_result(result.id)
        cancelled = await fetched.acancel()  # type: ignore[attr-defined]
        await result.arefresh()
        again = await backend.acancel(result.id)
        return result, fetched, cancelled, again

    result, fetched, cancelled, again = async_to_sync(scenario)()

    assert fetched.id == result.id and fetched.args == [4, 5]
    assert (cancelled, again) == (True, False)
    assert result.status == fetched.status == TaskResultStatus.FAILED
