"""Client-side hook delivery with real commits: each event of reference §6.6 reaches its
hooks only after the transition committed, exactly once, in the calling process."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction

import awa_django
from awa_django.channels import channel_for
from awa_django.client.client import Client
from awa_django.events import Cancelled, Completed, Exhausted, Retried
from testproject.shop.jobs import SendReceipt
from tests.integration.test_callbacks import ParkedJobFactory, callback_of, running_with_callback

pytestmark = pytest.mark.django_db(transaction=True)


def raw_connection() -> psycopg.Connection:
    """A connection of our own to the test database, outside Django's transaction."""
    s = connection.settings_dict
    return psycopg.connect(
        dbname=s["NAME"],
        host=s["HOST"] or None,
        port=s["PORT"] or None,
        user=s["USER"] or None,
        password=s["PASSWORD"] or None,
        autocommit=True,
    )


@pytest.fixture
def observer():
    with raw_connection() as conn:
        yield conn


def committed_state(conn: psycopg.Connection, job_id: int) -> str:
    row = conn.execute("SELECT state FROM awa_jobs_hot WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return row[0]


@pytest.fixture
def seen(clean_hooks, observer):
    """(event type, event.job.state, the state another connection sees) per hook call."""
    calls: list[tuple[type, str, str]] = []

    def hook(event):
        calls.append((type(event), event.job.state, committed_state(observer, event.job.id)))

    awa_django.on_event_kind("send_receipt", hook)
    return calls


OPERATIONS = {
    "complete parked": (
        ParkedJobFactory, lambda c, j: c.complete_external(j.callback_id), Completed, "completed"
    ),
    "complete running": (
        running_with_callback, lambda c, j: c.complete_external(j.callback_id), Completed,
        "completed",
    ),
    "fail parked": (
        ParkedJobFactory, lambda c, j: c.fail_external(j.callback_id, "no"), Exhausted, "failed"
    ),
    "fail running": (
        running_with_callback, lambda c, j: c.fail_external(j.callback_id, "no"), Exhausted,
        "failed",
    ),
    "retry parked": (
        ParkedJobFactory, lambda c, j: c.retry_external(j.callback_id), Retried, "available"
    ),
    "resolve complete": (
        ParkedJobFactory, lambda c, j: c.resolve_callback(j.callback_id, None, "complete"),
        Completed, "completed",
    ),
    "resolve fail": (
        running_with_callback, lambda c, j: c.resolve_callback(j.callback_id, None, "fail"),
        Exhausted, "failed",
    ),
    "cancel parked": (ParkedJobFactory, lambda c, j: c.cancel(j.id), Cancelled, "cancelled"),
}  # fmt: skip


@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_resolution_fires_its_event_once_after_commit(seen, operation):
    make, call, event_type, state = OPERATIONS[operation]
    job = make()
    call(Client(), job)
    assert seen == [(event_type, state, state)]


@pytest.mark.parametrize(
    "call",
    [
        lambda c, j: c.resume_external(j.callback_id, {"ok": True}),
        lambda c, j: c.heartbeat_callback(j.callback_id, 30),
        lambda c, j: c.resolve_callback(j.callback_id, {"ok": True}, "ignore"),
    ],
    ids=["resume", "heartbeat", "resolve-ignore"],
)
def test_resume_heartbeat_and_ignore_fire_nothing(seen, call):
    call(Client(), ParkedJobFactory())
    assert seen == []


def test_inside_an_outer_transaction_hooks_wait_for_its_commit(seen, observer):
    job = ParkedJobFactory()
    with transaction.atomic():
        Client().complete_external(callback_of(job))
        assert seen == []
        assert committed_state(observer, job.id) == "waiting_external"
    assert seen == [(Completed, "completed", "completed")]


def test_a_rolled_back_resolution_fires_nothing_and_changes_nothing(seen, observer):
    job = ParkedJobFactory()
    with pytest.raises(RuntimeError), transaction.atomic():
        Client().fail_external(callback_of(job), "no")
        raise RuntimeError("the caller's transaction fails")
    assert seen == [] and committed_state(observer, job.id) == "waiting_external"
    assert Client().complete_external(callback_of(job)).state == "completed"  # still pending
    assert seen == [(Completed, "completed", "completed")]


def test_a_failing_hook_neither_hides_the_result_nor_stops_later_hooks(seen, caplog):
    def broken(event):
        raise RuntimeError("hook bug")

    awa_django.on_any_event(broken)
    later: list[str] = []
    awa_django.on_any_event(lambda e: later.append(e.job.state))
    job = ParkedJobFactory()
    with caplog.at_level(logging.ERROR, logger="awa_django.hooks"):
        row = Client().complete_external(callback_of(job))
    assert row.state == "completed" and later == ["completed"]
    assert seen == [(Completed, "completed", "completed")]
    assert any(str(job.id) in r.getMessage() for r in caplog.records)


def test_a_typed_hook_that_cannot_decode_the_args_is_skipped_and_the_job_is_untouched(seen, caplog):
    typed: list[object] = []
    awa_django.on_event(SendReceipt, typed.append)
    job = ParkedJobFactory(args={"order_id": "not-an-int"})
    with caplog.at_level(logging.WARNING, logger="awa_django.hooks"):
        assert Client().complete_external(callback_of(job)).state == "completed"
    assert typed == [] and seen == [(Completed, "completed", "completed")]
    assert any("SendReceipt" in r.getMessage() for r in caplog.records)


def test_retry_external_wakes_the_queue_on_commit(observer):
    job = ParkedJobFactory(queue="email")
    observer.execute(f'LISTEN "{channel_for("email")}"')
    Client().retry_external(callback_of(job))
    notices = list(observer.notifies(timeout=10, stop_after=1))
    assert [n.channel for n in notices] == [channel_for("email")]


def test_async_twins_fire_sync_and_async_hooks_from_async_code(seen):
    async_seen: list[str] = []

    async def async_hook(event):
        await asyncio.sleep(0)
        async_seen.append(event.job.state)

    awa_django.on_any_event(async_hook)
    parked, running = ParkedJobFactory(), running_with_callback()
    client = Client()

    async def main():
        try:
            await client.acomplete_external(callback_of(parked))
            await client.afail_external(callback_of(running), "declined")
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(main())
    assert seen == [(Completed, "completed", "completed"), (Exhausted, "failed", "failed")]
    assert async_seen == ["completed", "failed"]
