"""The user-facing test helpers of `awa_django.testing`: drain, assert_enqueued /
assert_not_enqueued, capture_events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import awa_django
from awa_django import Client, JobContext, Snooze
from awa_django.events import Completed, Exhausted, Started
from awa_django.registry import HookRegistration, registry
from awa_django.states import JobState
from awa_django.storage.models import Job as JobModel
from awa_django.testing import (
    assert_enqueued,
    assert_not_enqueued,
    capture_events,
    drain,
    enqueued_jobs,
)
from testproject.shop.jobs import ChargeCard, SendReceipt
from tests import tasks_for_tests as t
from tests.factories import JobFactory


@dataclass
class SnoozeForever:
    """A job that never finishes: drain() must give up on it."""

    __awa_kind__ = "testing_helpers_snooze_forever"
    n: int = 0


@awa_django.job(SnoozeForever)
def snooze_forever(job: JobContext[SnoozeForever]) -> Snooze:
    return Snooze(0)


@dataclass
class EnqueueForever:
    """A job that enqueues its successor, available at once."""

    __awa_kind__ = "testing_helpers_enqueue_forever"


@awa_django.job(EnqueueForever)
def enqueue_forever(job: JobContext[EnqueueForever]) -> None:
    awa_django.enqueue(EnqueueForever())


@dataclass
class FanOut:
    """Enqueues `count` receipts: jobs that handlers enqueue must be drained too."""

    __awa_kind__ = "testing_helpers_fan_out"
    count: int


@awa_django.job(FanOut)
def fan_out(job: JobContext[FanOut]) -> None:
    for n in range(job.args.count):
        awa_django.enqueue(SendReceipt(order_id=n))


LONG_AGO = timezone.now() - timedelta(days=1)  # before any test transaction's now()


def states() -> dict[int, str]:
    return dict(JobModel.objects.values_list("id", "state"))


# -- drain --------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_drain_runs_every_available_job_and_counts_attempts() -> None:
    first = Client().enqueue(SendReceipt(order_id=1))
    second = Client().enqueue(ChargeCard(order_id=2, amount_cents=100))

    assert drain() == 2
    assert states() == {first.id: "completed", second.id: "completed"}
    assert drain() == 0


@pytest.mark.django_db
def test_drain_of_one_queue_leaves_the_others() -> None:
    email = Client().enqueue(SendReceipt(order_id=1))  # queue "email"
    default = Client().enqueue(ChargeCard(order_id=2, amount_cents=100))

    assert drain("email") == 1
    assert states() == {email.id: "completed", default.id: "available"}


@pytest.mark.django_db
def test_drain_runs_due_scheduled_jobs_but_not_future_ones() -> None:
    due = Client().enqueue(SendReceipt(order_id=1), run_at=LONG_AGO)
    later = Client().enqueue(SendReceipt(order_id=2), run_at=timezone.now() + timedelta(hours=1))
    assert states() == {due.id: "scheduled", later.id: "scheduled"}

    assert drain() == 1
    assert states() == {due.id: "completed", later.id: "scheduled"}


@pytest.mark.django_db
def test_drain_runs_jobs_that_handlers_enqueue() -> None:
    Client().enqueue(FanOut(count=3))

    assert drain() == 4
    assert set(states().values()) == {"completed"}


@pytest.mark.django_db
def test_drain_leaves_a_retry_waiting_for_its_backoff(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "awa_django.backends.AwaBackend"}}
    result = t.flaky.enqueue()

    assert drain() == 1
    assert states() == {int(result.id): "retryable"}


@pytest.mark.django_db
@pytest.mark.parametrize("endless", [SnoozeForever(), EnqueueForever()], ids=["snooze", "enqueue"])
def test_drain_gives_up_on_jobs_that_never_finish(endless: Any) -> None:
    Client().enqueue(endless)

    with pytest.raises(AssertionError, match="ran 5 attempts and jobs keep becoming due"):
        drain(limit=5)
    claims = sum(JobModel.objects.values_list("run_lease", flat=True))
    assert claims == 5  # run_lease counts claims: exactly `limit` attempts ran


@pytest.mark.django_db
def test_drain_limit_is_not_hit_by_exactly_that_many_attempts() -> None:
    Client().enqueue(FanOut(count=4))

    assert drain(limit=5) == 5


# -- assert_enqueued / assert_not_enqueued --------------------------------------------------------
@pytest.mark.django_db
def test_assert_enqueued_matches_kind_and_fields() -> None:
    job = Client().enqueue(SendReceipt(order_id=7, email="a@example.com"))
    Client().enqueue(SendReceipt(order_id=8))

    [match] = assert_enqueued(SendReceipt, order_id=7)
    assert match.id == job.id
    assert_enqueued(SendReceipt, queue="email", order_id=7, email="a@example.com")
    assert_enqueued(SendReceipt, count=2)
    assert_enqueued("send_receipt", count=1, order_id=8)


@pytest.mark.django_db
def test_assert_enqueued_failure_lists_what_is_enqueued() -> None:
    job = Client().enqueue(SendReceipt(order_id=7))

    with pytest.raises(AssertionError) as failure:
        assert_enqueued(SendReceipt, order_id=8)

    message = str(failure.value)
    assert "expected a 'send_receipt' job with order_id=8, found 0" in message
    assert f"#{job.id} send_receipt queue=email state=available" in message
    assert "'order_id': 7" in message


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"count": 1}, "exactly 1 'send_receipt' job, found 2"),
        ({"queue": "default"}, "'send_receipt' job on queue 'default', found 0"),
        ({"email": "nobody@example.com"}, "with email='nobody@example.com'"),
    ],
)
def test_assert_enqueued_fails_on_count_queue_and_fields(
    options: dict[str, Any], expected: str
) -> None:
    Client().enqueue(SendReceipt(order_id=1))
    Client().enqueue(SendReceipt(order_id=2))

    with pytest.raises(AssertionError, match=expected):
        assert_enqueued(SendReceipt, **options)


@pytest.mark.django_db
def test_assert_enqueued_with_nothing_enqueued_says_so() -> None:
    with pytest.raises(AssertionError, match="Nothing is enqueued"):
        assert_enqueued(SendReceipt)


# Every state is one or the other: a new state fails the test below until it is placed.
NOT_ENQUEUED = ("running", "waiting_external", "completed", "failed", "cancelled")
ENQUEUED = ("scheduled", "waiting_parents", "available", "retryable", "waiting_slot")


@pytest.mark.django_db
def test_only_waiting_jobs_count_as_enqueued() -> None:
    assert sorted(NOT_ENQUEUED + ENQUEUED) == sorted(JobState.values)
    for state in NOT_ENQUEUED:
        JobFactory(kind="send_receipt", state=state, args={"order_id": 1})
    assert_not_enqueued(SendReceipt)

    for state in ENQUEUED:
        JobFactory(kind="send_receipt", state=state, args={"order_id": 1})
    assert_enqueued(SendReceipt, order_id=1, count=len(ENQUEUED))
    assert [j.state for j in enqueued_jobs(SendReceipt)] == list(ENQUEUED)


@pytest.mark.django_db
def test_a_child_waiting_for_its_parents_is_enqueued() -> None:
    # The everyday case: a follow-up chained after the job a view enqueued.
    [_, receipt] = awa_django.chain(
        ChargeCard(order_id=1, amount_cents=5),
        awa_django.step(SendReceipt(order_id=1), unique=False),
    )
    assert receipt.state == "waiting_parents"
    assert_enqueued(SendReceipt, order_id=1)
    with pytest.raises(AssertionError):
        assert_not_enqueued(SendReceipt, order_id=1)


@pytest.mark.django_db
def test_assert_not_enqueued_fails_when_a_match_exists() -> None:
    Client().enqueue(SendReceipt(order_id=1))

    assert_not_enqueued(SendReceipt, order_id=2)
    assert_not_enqueued(ChargeCard)
    with pytest.raises(AssertionError, match="expected no 'send_receipt' job with order_id=1"):
        assert_not_enqueued(SendReceipt, order_id=1)


@pytest.mark.django_db
def test_drained_jobs_are_no_longer_enqueued() -> None:
    Client().enqueue(SendReceipt(order_id=1))
    assert_enqueued(SendReceipt, order_id=1)

    drain()

    assert_not_enqueued(SendReceipt)


@pytest.mark.django_db
def test_assert_enqueued_accepts_django_tasks(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "awa_django.backends.AwaBackend"}}
    t.echo.enqueue(1, (2, 3), k="v")

    assert_enqueued(t.echo, args=[1, (2, 3)], kwargs={"k": "v"})
    [job] = assert_enqueued("tests.tasks_for_tests.echo", count=1)
    assert_not_enqueued(t.add)
    # The backend's marker lives in its own column, not in the job's metadata.
    assert (job.metadata, job.django_task) == ({}, {"backend": "default", "run_after": None})


# -- capture_events ----------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_capture_events_records_the_lifecycle_in_order() -> None:
    ok = Client().enqueue(SendReceipt(order_id=1))
    bad = Client().enqueue(ChargeCard(order_id=2, amount_cents=0))

    with capture_events() as events:
        drain()

    assert [(type(e).__name__, e.job.id) for e in events.for_kind(SendReceipt)] == [
        ("Started", ok.id),
        ("Completed", ok.id),
    ]
    [exhausted] = events.of_type(Exhausted)
    assert isinstance(exhausted, Exhausted)
    assert exhausted.job.id == bad.id and "refusing to charge 0 cents" in exhausted.error
    assert events.names().count("Started") == 2 and len(events) == 4
    assert all(isinstance(e, Started | Completed | Exhausted) for e in events)


@pytest.mark.django_db
def test_capture_events_in_a_rolled_back_test_needs_on_commit(
    django_capture_on_commit_callbacks: Any,
) -> None:
    Client().enqueue(SendReceipt(order_id=1))

    with capture_events() as events:
        drain()
        assert events.names() == []  # dispatched only once the transaction commits
        with django_capture_on_commit_callbacks(execute=True):
            drain()
            Client().enqueue(SendReceipt(order_id=2))
            drain()

    assert events.names() == ["Started", "Completed"]


@pytest.mark.django_db(transaction=True)
def test_capture_events_removes_its_hook_and_keeps_others(clean_hooks: Any) -> None:
    before = registry.hooks()
    added = HookRegistration("send_receipt", lambda e: None, frozenset({Completed}), None)

    with capture_events() as events:
        registry.add_hook(added)

    assert registry.hooks() == [*before, added]
    Client().enqueue(SendReceipt(order_id=1))
    drain()
    assert len(events) == 0


@pytest.mark.django_db
def test_capture_events_sees_client_cancel_on_commit(
    django_capture_on_commit_callbacks: Any,
) -> None:
    job = awa_django.enqueue(SendReceipt(order_id=1))

    with capture_events() as events, django_capture_on_commit_callbacks(execute=True):
        Client().cancel(job.id)

    assert events.names() == ["Cancelled"]
    assert events.events[0].job.state == "cancelled"
