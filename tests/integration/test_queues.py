"""Queue operations and figures through the Client (`pause_queue`, `resume_queue`,
`queue_stats`, `live_workers`), the duration display and the estimated-count paginator,
against the real database."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass

import factory
import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.utils import timezone

import awa_django
from awa_django.admin.paginator import EstimatedCountPaginator
from awa_django.client import Client, QueueStats
from awa_django.display import format_duration
from awa_django.exceptions import InvalidQueueName
from awa_django.storage.models import Job, QueueState, WorkerInstance
from tests.factories import JobFactory, ModelFactory

pytestmark = pytest.mark.django_db


class WorkerInstanceFactory(ModelFactory[WorkerInstance]):
    class Meta:
        model = WorkerInstance

    worker_id = factory.Sequence(lambda n: f"worker-{n}")
    hostname = "host-a"
    pid = factory.Sequence(lambda n: 1000 + n)
    queues = factory.LazyFunction(lambda: {"default": 10})


def ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


def by_name(stats: list[QueueStats]) -> dict[str, QueueStats]:
    return {q.queue: q for q in stats}


def test_depth_counts_each_state_per_queue_but_not_completed():
    JobFactory.create_batch(3, queue="default", state="available")
    JobFactory.create_batch(2, queue="default", state="running")
    JobFactory(queue="default", state="failed")
    JobFactory(queue="email", state="waiting_external")
    JobFactory(queue="email", state="completed", finalized_at=ago(3600))

    stats = by_name(Client().queue_stats())

    assert stats["default"].depth == {"available": 3, "running": 2, "failed": 1}
    assert stats["default"].running == 2
    assert stats["email"].depth == {"waiting_external": 1}
    assert "completed" not in stats["email"].depth


def test_configured_queues_are_listed_even_without_jobs():
    names = [q.queue for q in Client().queue_stats()]
    assert names == sorted(names)
    assert {"default", "email"} <= set(names)
    assert by_name(Client().queue_stats())["email"].depth == {}


def test_throughput_counts_completions_in_the_last_minute_and_window():
    JobFactory(queue="email", state="completed", finalized_at=ago(20))
    JobFactory(queue="email", state="completed", finalized_at=ago(180))
    JobFactory(queue="email", state="completed", finalized_at=ago(600))
    JobFactory(queue="email", state="failed", finalized_at=ago(20))

    email = by_name(Client().queue_stats(window_minutes=5))["email"]

    assert (email.completed_last_minute, email.completed_in_window) == (1, 2)
    assert email.throughput_per_minute == pytest.approx(0.4)
    assert by_name(Client().queue_stats(window_minutes=15))["email"].completed_in_window == 3


def test_lag_is_the_age_of_the_oldest_available_job():
    JobFactory(queue="default", state="available", run_at=ago(120))
    JobFactory(queue="default", state="available", run_at=ago(5))
    JobFactory(queue="default", state="scheduled", run_at=ago(900))  # not yet promoted

    stats = by_name(Client().queue_stats())

    lag = stats["default"].lag_seconds
    assert lag is not None and 110 < lag < 200
    assert stats["email"].lag_seconds is None


def test_queue_stats_is_five_queries(django_assert_num_queries):
    """Four for the jobs and queue states, one for the dead letters per queue (the
    dashboard's dead-letter table reads the same figures, not a query of its own)."""
    JobFactory.create_batch(5, state="available")
    with django_assert_num_queries(5):
        Client().queue_stats()


def test_queue_stats_rejects_an_empty_window():
    with pytest.raises(ValueError, match="window_minutes"):
        Client().queue_stats(window_minutes=0)


def test_pause_and_resume_are_idempotent_and_show_in_stats():
    paused = Client().pause_queue("email", by="ops@example.com")
    Client().pause_queue("email", by="ops@example.com")

    assert paused.paused and paused.paused_at is not None
    email = by_name(Client().queue_stats())["email"]
    assert (email.paused, email.paused_by) == (True, "ops@example.com")

    Client().resume_queue("email")
    Client().resume_queue("email")

    row = QueueState.objects.get(queue="email")
    assert (row.paused, row.paused_at, row.paused_by) == (False, None, "")
    assert by_name(Client().queue_stats())["email"].paused is False


def test_a_paused_queue_without_jobs_or_config_is_listed():
    Client().pause_queue("reports")
    assert by_name(Client().queue_stats())["reports"].paused


def test_pause_rejects_a_bad_queue_name():
    with pytest.raises(InvalidQueueName):
        Client().pause_queue("no spaces allowed")
    assert not QueueState.objects.exists()


def test_paused_by_is_stored_whatever_text_it_gets():
    with transaction.atomic():
        state = Client().pause_queue("email", by="nul\x00 lone\ud800 " + "x" * 300)
        assert QueueState.objects.get(queue="email").paused_by == state.paused_by
    assert "\x00" not in state.paused_by and len(state.paused_by) == 200


@dataclass
class QueuesDeclared:
    n: int


@awa_django.job(QueuesDeclared, queue="queues-declared")
def queues_declared(job: awa_django.JobContext[QueuesDeclared]) -> None:
    return None


def test_known_queues_are_configured_declared_or_paused_once():
    Client().pause_queue("reports")
    Client().resume_queue("reports")
    known = Client().known_queues()
    assert {"default", "email", "reports"} <= known  # AWA["QUEUES"] and the queue state
    assert "queues-declared" in known  # by the @job above


@pytest.mark.django_db(transaction=True)
def test_queue_operations_have_async_twins():
    async def operate() -> tuple[bool, bool, list[str]]:
        client = Client()
        paused = await client.apause_queue("email", by="ops")
        resumed = await client.aresume_queue("email")
        stats = await client.aqueue_stats()
        await sync_to_async(connections.close_all)()
        return paused.paused, resumed.paused, [q.queue for q in stats]

    paused, resumed, names = asyncio.run(operate())
    assert (paused, resumed) == (True, False) and "email" in names


def test_live_workers_are_the_recently_seen_ones_leader_first():
    WorkerInstanceFactory(worker_id="old", last_seen_at=ago(600))
    WorkerInstanceFactory(worker_id="b", hostname="host-b")
    WorkerInstanceFactory(worker_id="leader", hostname="host-z", leader=True)

    assert [w.worker_id for w in Client().live_workers()] == ["leader", "b"]
    # then by hostname: "old" runs on host-a
    assert [w.worker_id for w in Client().live_workers(within_seconds=3600)] == [
        "leader",
        "old",
        "b",
    ]


def test_as_dict_lists_every_depth_state():
    JobFactory(state="failed")
    doc = by_name(Client().queue_stats())["default"].as_dict()
    assert doc["depth"] == {
        "scheduled": 0,
        "waiting_parents": 0,
        "available": 0,
        "running": 0,
        "waiting_external": 0,
        "retryable": 0,
        "failed": 1,
        "cancelled": 0,
        "waiting_slot": 0,
    }
    assert doc["lag_seconds"] is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (2.345, "2.3s"),
        (42, "42s"),
        (192, "3m 12s"),
        (7500, "2h 5m"),
        (349200, "4d 1h"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


# -- the paginator -----------------------------------------------------------------------
def test_paginator_counts_exactly_up_to_its_limit():
    JobFactory.create_batch(7)
    paginator = EstimatedCountPaginator(Job.objects.all(), 5)
    paginator.exact_limit = 10
    assert (paginator.count, paginator.is_estimate) == (7, False)
    assert paginator.num_pages == 2


def test_paginator_estimates_beyond_its_limit(django_assert_max_num_queries):
    JobFactory.create_batch(12)
    paginator = EstimatedCountPaginator(Job.objects.filter(state="available"), 5)
    paginator.exact_limit = 10
    with django_assert_max_num_queries(2):  # the bounded count, then EXPLAIN
        count = paginator.count
    assert paginator.is_estimate
    assert count >= 11  # never below what the bounded count saw


def test_unhandled_kinds_are_waiting_kinds_no_live_worker_has():
    WorkerInstanceFactory(worker_id="w1", kinds=["send_receipt"])
    WorkerInstanceFactory(worker_id="w2", kinds=["charge_card"], serves_tasks=True)
    WorkerInstanceFactory(worker_id="gone", kinds=["new_kind"], last_seen_at=ago(600))
    JobFactory.create_batch(2, kind="new_kind", state="scheduled")
    JobFactory(kind="new_kind", state="completed")  # finished work does not count
    JobFactory(kind="send_receipt")
    JobFactory(kind="charge_card", state="retryable")
    JobFactory(kind="shop.tasks.refund")  # a django.tasks kind: w2 resolves those
    assert Client().unhandled_kinds() == {"new_kind": 2}


def test_unhandled_kinds_count_the_lines_behind_keys_and_parents():
    # A rolling deploy of a keyed kind: one job of the key is admitted, the rest wait for
    # its slot, and a child waits for its parent; all of them wait for the new workers.
    WorkerInstanceFactory(worker_id="w1", kinds=["send_receipt"])
    JobFactory(kind="new_kind", state="available")
    JobFactory.create_batch(3, kind="new_kind", state="waiting_slot")
    JobFactory(kind="new_kind", state="waiting_parents")
    assert Client().unhandled_kinds() == {"new_kind": 5}


def test_unhandled_kinds_is_empty_without_a_live_worker():
    JobFactory(kind="anything")
    assert Client().unhandled_kinds() == {}
