"""Migration 0015 (decision 046) upgrades a database with a workflow in flight: a child
enqueued before it, still waiting, is announced when its parent fails after it; the
reverse puts the silent trigger back and drops the outbox (unannounced rows with it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

import awa_django
from awa_django import Client
from awa_django.events import Cancelled, Event
from awa_django.storage.models import Job
from awa_django.worker.database import Database
from awa_django.worker.maintenance.announcer import Announcer
from testproject.shop.jobs import SendReceipt
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("awa_django", "0014_concurrency_keys")


@pytest.fixture
def at_0014() -> Iterator[None]:
    MigrationExecutor(connection).migrate([BEFORE])
    try:
        yield
    finally:
        call_command("migrate", "awa_django", verbosity=0)


def announced() -> list[Event]:
    emitted: list[Event] = []

    async def run(db: Database) -> list[Event]:
        return await Announcer(db, emitted.append).run_once()

    with_db(run)
    return emitted


def outbox_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('awa_event_outbox') IS NOT NULL")
        return bool(cursor.fetchone()[0])


def test_a_child_waiting_across_the_upgrade_is_announced(at_0014: None) -> None:
    parent = awa_django.enqueue(SendReceipt(order_id=1)).id
    child = awa_django.enqueue(SendReceipt(order_id=2), after=[parent], unique=False).id
    call_command("migrate", "awa_django", verbosity=0)
    Client().cancel(parent)
    (event,) = announced()
    assert isinstance(event, Cancelled) and event.job.id == child
    assert event.job.state == "cancelled"


def test_the_reverse_restores_the_silent_trigger(at_0014: None) -> None:
    call_command("migrate", "awa_django", verbosity=0)
    first = awa_django.enqueue(SendReceipt(order_id=1)).id
    awa_django.enqueue(SendReceipt(order_id=2), after=[first], unique=False)
    Client().cancel(first)  # an announcement left unclaimed
    MigrationExecutor(connection).migrate([BEFORE])
    assert not outbox_exists()
    parent = awa_django.enqueue(SendReceipt(order_id=3)).id
    child = awa_django.enqueue(SendReceipt(order_id=4), after=[parent], unique=False).id
    Client().cancel(parent)  # the 0013 body: cancels, writes nothing else
    assert Job.objects.get(id=child).state == "cancelled"
