"""Atomic attempts (`@job(atomic=True)`, the queue's `"atomic"` default; decision 015)
against both schedulers of the one attempt lifecycle, with the conformance suite's
`run_attempt`: the handler's writes (a testjobs `Invoice`, a job it enqueues) commit with
its guarded outcome or not at all."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import DataError, connection, transaction
from django.test import override_settings

import awa_django
from awa_django.events import Completed
from awa_django.exceptions import InvalidJobDeclaration
from awa_django.execution import atomic
from awa_django.execution.context import JobContext
from awa_django.results import Cancel, RetryAfter
from awa_django.storage.models import Job
from testproject.testjobs.models import Invoice
from tests.integration.test_attempt_conformance import QUEUE, names, outcome_event, run_attempt
from tests.runtime_db import first_claim

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["inline", "worker"])
def scheduler(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


class EffectBoom(Exception):
    pass


@dataclass
class Effect:
    mode: str
    order_id: int = 1


@dataclass
class Enqueued:
    """What a handler enqueues inside its transaction (no handler: it stays available)."""

    order_id: int


def _cancel_from_another_connection(job_id: int) -> None:
    """An operator's cancel, committed on its own connection while the handler runs."""

    def cancel() -> None:
        try:
            awa_django.Client().cancel(job_id)
        finally:
            connection.close()

    thread = threading.Thread(target=cancel)
    thread.start()
    thread.join()


AFTER_WRITING: dict[str, Callable[[JobContext[Effect]], Any]] = {
    "complete": lambda job: None,
    "raise": lambda job: (_ for _ in ()).throw(EffectBoom("after writing")),
    "enqueue": lambda job: awa_django.enqueue(Enqueued(job.args.order_id)) and None,
    "cancelled_meanwhile": lambda job: _cancel_from_another_connection(job.id),
    "cancel": lambda job: Cancel("no longer needed"),
    "retry_after": lambda job: RetryAfter(30),
    "unstorable_result": lambda job: setattr(job, "result", object()),
    "break_the_transaction": lambda job: _swallow_a_database_error(),
}


def _swallow_a_database_error() -> None:
    """A handler that catches its own database error: its transaction is aborted."""
    with connection.cursor() as cursor, contextlib.suppress(DataError):
        cursor.execute("SELECT 1 / 0")


def _write_then(job: JobContext[Effect]) -> Any:
    Invoice.objects.create(
        order_id=job.args.order_id, job_id=job.id, run_lease=job.run_lease, pid=0
    )
    if job.args.mode == "enqueue_then_raise":
        awa_django.enqueue(Enqueued(job.args.order_id))
        raise EffectBoom("after enqueueing")
    return AFTER_WRITING[job.args.mode](job)


@awa_django.job(Effect, queue=QUEUE, max_attempts=3, atomic=True)
def effect(job: JobContext[Effect]) -> Any:
    return _write_then(job)


@dataclass
class QueueDefault:
    mode: str
    order_id: int = 1


@dataclass
class OptedOut:
    mode: str
    order_id: int = 1


@awa_django.job(QueueDefault, queue=QUEUE, max_attempts=3)
def queue_default(job: JobContext[QueueDefault]) -> Any:
    return _write_then(job)  # type: ignore[arg-type]


@awa_django.job(OptedOut, queue=QUEUE, max_attempts=3, atomic=False)
def opted_out(job: JobContext[OptedOut]) -> Any:
    return _write_then(job)  # type: ignore[arg-type]


def invoices() -> list[tuple[int, int]]:
    """(order id, 1) for each invoice a job's first attempt wrote (its run_lease is 1 inline
    and epoch * EPOCH_SPACE in a worker), (order id, run_lease) for any other."""
    rows = Invoice.objects.values_list("order_id", "run_lease")
    return [(order, 1 if first_claim(lease) else lease) for order, lease in rows]


def test_the_writes_commit_with_the_completion(scheduler: str) -> None:
    job_id = awa_django.enqueue(Effect("complete", order_id=5)).id
    job, events = run_attempt(scheduler, job_id)
    assert job.state == "completed"
    assert invoices() == [(5, 1)]
    assert outcome_event(events, Completed).job.state == "completed"


def test_a_handler_that_raises_leaves_no_row_and_its_failure_commits(scheduler: str) -> None:
    job_id = awa_django.enqueue(Effect("raise")).id
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt) == ("retryable", 1)
    assert job.errors[-1]["type"] == f"{__name__}.EffectBoom"
    assert invoices() == []
    assert names(events) == ["Started", "Retried"]


def test_a_job_enqueued_inside_commits_with_the_handler(scheduler: str) -> None:
    run_attempt(scheduler, awa_django.enqueue(Effect("enqueue", order_id=8)).id)
    (enqueued,) = Job.objects.filter(kind="enqueued")
    assert (enqueued.args, enqueued.state) == ({"order_id": 8}, "available")


def test_a_job_enqueued_inside_is_rolled_back_with_a_raising_handler(scheduler: str) -> None:
    job, _ = run_attempt(scheduler, awa_django.enqueue(Effect("enqueue_then_raise")).id)
    assert job.state == "retryable"
    assert not Job.objects.filter(kind="enqueued").exists()
    assert invoices() == []


def test_a_stale_outcome_rolls_the_writes_back_and_ends_quietly(scheduler: str) -> None:
    job_id = awa_django.enqueue(Effect("cancelled_meanwhile")).id
    job, events = run_attempt(scheduler, job_id)
    # Cancelled on another connection while the handler ran: the completion's guard
    # matched nothing, so the handler's invoice went with it; no Completed fires.
    assert job.state == "cancelled"
    assert invoices() == []
    assert "Completed" not in names(events)


@pytest.mark.parametrize(("mode", "state"), [("cancel", "cancelled"), ("retry_after", "retryable")])
def test_the_writes_commit_with_any_outcome_the_handler_asks_for(
    scheduler: str, mode: str, state: str
) -> None:
    job, _ = run_attempt(scheduler, awa_django.enqueue(Effect(mode)).id)
    assert job.state == state
    assert invoices() == [(1, 1)]


def test_a_result_that_cannot_be_stored_rolls_the_writes_back(scheduler: str) -> None:
    job, events = run_attempt(scheduler, awa_django.enqueue(Effect("unstorable_result")).id)
    assert (job.state, job.errors[-1]["type"]) == (
        "failed",
        "awa_django.exceptions.SerializationError",
    )
    assert invoices() == []
    assert names(events) == ["Started", "Exhausted"]


def test_an_outcome_that_fails_to_commit_retries_the_job_without_its_writes(
    scheduler: str,
) -> None:
    job, events = run_attempt(scheduler, awa_django.enqueue(Effect("break_the_transaction")).id)
    # Not a value the database refuses for good: this attempt fails, the job retries.
    assert (job.state, job.errors[-1].get("terminal")) == ("retryable", None)
    assert (
        "InFailedSqlTransaction" in job.errors[-1]["error"]
        or "transaction is aborted" in (job.errors[-1]["error"])
    )
    assert invoices() == []
    assert names(events) == ["Started", "Retried"]


@override_settings(AWA={"QUEUES": {QUEUE: {"atomic": True}}})
def test_the_queue_default_makes_a_def_handler_atomic(scheduler: str) -> None:
    job, _ = run_attempt(scheduler, awa_django.enqueue(QueueDefault("raise")).id)
    assert job.state == "retryable"
    assert invoices() == []


@override_settings(AWA={"QUEUES": {QUEUE: {"atomic": True}}})
def test_an_explicit_atomic_false_wins_over_the_queue_default(scheduler: str) -> None:
    job, _ = run_attempt(scheduler, awa_django.enqueue(OptedOut("raise")).id)
    assert job.state == "retryable"
    assert invoices() == [(1, 1)]  # autocommit: the write stayed


def test_without_atomic_a_raising_handler_keeps_its_writes(scheduler: str) -> None:
    run_attempt(scheduler, awa_django.enqueue(QueueDefault("raise")).id)
    assert invoices() == [(1, 1)]


def test_atomic_true_on_an_async_handler_is_refused_at_declaration() -> None:
    @dataclass
    class AsyncAtomic:
        n: int

    with pytest.raises(InvalidJobDeclaration, match="cannot span an async handler"):

        @awa_django.job(AsyncAtomic, atomic=True)
        async def handler(job: JobContext[AsyncAtomic]) -> None: ...


def test_atomic_must_be_a_bool() -> None:
    @dataclass
    class Sloppy:
        n: int

    with pytest.raises(InvalidJobDeclaration, match="takes True or False"):
        awa_django.job(Sloppy, atomic="yes")  # type: ignore[arg-type]


# -- a handler that writes nothing (decision 023) -----------------------------------------
@dataclass
class Untouched:
    mode: str


ON_COMMIT_RAN: list[int] = []


@awa_django.job(Untouched, queue=QUEUE, max_attempts=3, atomic=True)
def untouched(job: JobContext[Untouched]) -> Any:
    if job.args.mode == "read":
        Invoice.objects.exists()
    if job.args.mode.startswith("on_commit"):
        transaction.on_commit(lambda: ON_COMMIT_RAN.append(job.id))
    if job.args.mode.endswith("cancelled_meanwhile"):
        _cancel_from_another_connection(job.id)
    return None


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which way each atomic attempt ended: "committed" (its own transaction) or "plain"
    (handed back to the scheduler's ordinary outcome path)."""
    seen: list[str] = []
    real = atomic.run

    def spy(*args: Any, **kwargs: Any) -> Any:
        outcome = real(*args, **kwargs)
        seen.append("committed" if isinstance(outcome, atomic.Committed) else "plain")
        return outcome

    monkeypatch.setattr(atomic, "run", spy)
    return seen


def test_a_handler_that_wrote_nothing_completes_the_plain_way(
    scheduler: str, paths: list[str]
) -> None:
    job, events = run_attempt(scheduler, awa_django.enqueue(Untouched("nothing")).id)
    assert job.state == "completed" and names(events) == ["Started", "Completed"]
    assert paths == ["plain"]


@pytest.mark.parametrize("mode", ["read", "on_commit"])
def test_a_handler_that_read_or_awaits_its_commit_keeps_its_transaction(
    scheduler: str, paths: list[str], mode: str
) -> None:
    ON_COMMIT_RAN.clear()
    job, _ = run_attempt(scheduler, awa_django.enqueue(Untouched(mode)).id)
    assert job.state == "completed" and paths == ["committed"]
    assert ([job.id] if mode == "on_commit" else []) == ON_COMMIT_RAN


def test_a_stale_outcome_drops_the_on_commit_callbacks_of_a_handler_that_wrote_nothing(
    scheduler: str, paths: list[str]
) -> None:
    ON_COMMIT_RAN.clear()
    job, events = run_attempt(
        scheduler, awa_django.enqueue(Untouched("on_commit_cancelled_meanwhile")).id
    )
    assert job.state == "cancelled" and "Completed" not in names(events)
    assert ON_COMMIT_RAN == [] and paths == ["committed"]
