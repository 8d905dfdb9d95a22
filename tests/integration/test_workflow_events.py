"""Children cancelled by the fan-in trigger announce `Cancelled` (decision 046): the
leader's `Announcer` (driven here by `run_once`) and `testing.drain()` claim the outbox
rows the trigger writes in the parent's transaction, insert the kind's Cancelled
follow-ups in the claim's transaction, and dispatch one event per child once it commits.
The audit against committed transitions, on both schedulers, is in
test_transition_conformance.py; a real worker's, in tests/acceptance."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import pytest

import awa_django
from awa_django import Client, TerminalError
from awa_django.events import Cancelled, Event
from awa_django.execution.context import JobContext
from awa_django.storage.models import Job
from awa_django.storage.workflows import EventAnnouncement
from awa_django.testing import capture_events, drain
from awa_django.worker.database import Database
from awa_django.worker.maintenance import announcer
from awa_django.worker.maintenance.announcer import Announcer
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "wf-events"
FOLLOW = "wf-events-follow"
REASON = "cancelled: a parent failed"


@dataclass
class Leg:
    name: str
    fail: bool = False


@awa_django.job(Leg, queue=QUEUE, max_attempts=1)
def leg_handler(job: JobContext[Leg]) -> None:
    if job.args.fail:
        raise TerminalError(f"{job.args.name} failed")


@dataclass
class Undo:
    name: str
    reason: str


def chain_after(parent: int, *names: str) -> list[int]:
    """Waiting children, each after the one before it (policy `cancel`)."""
    ids = []
    for name in names:
        job = awa_django.enqueue(Leg(name), after=[parent], on_parent_failure="cancel")
        ids.append(parent := job.id)
    return ids


def announce() -> list[Event]:
    emitted: list[Event] = []

    async def run(db: Database) -> list[Event]:
        return await Announcer(db, emitted.append).run_once()

    assert with_db(run) == emitted
    return emitted


def cancelled(events: list[Event]) -> list[tuple[int, str]]:
    assert all(isinstance(e, Cancelled) for e in events)
    return [(e.job.id, e.reason) for e in events if isinstance(e, Cancelled)]


def undone() -> list[tuple[str, str]]:
    rows = Job.objects.filter(kind="undo").order_by("id").values_list("args", flat=True)
    return [(a["name"], a["reason"]) for a in rows]


def on_cancelled_undo(args: Leg, event: Cancelled[Leg]) -> list[awa_django.FollowUp]:
    return [awa_django.follow_up(Undo(args.name, event.reason), queue=FOLLOW)]


# -- the leader's announcer ----------------------------------------------------------------
def test_the_announcer_emits_each_cancelled_child_once_in_cascade_order() -> None:
    parent = awa_django.enqueue(Leg("parent")).id
    child, grandchild = chain_after(parent, "child", "grandchild")
    Client().cancel(parent)  # the operator's cancel: the children follow their policy
    assert EventAnnouncement.objects.count() == 2
    events = announce()
    assert cancelled(events) == [(child, REASON), (grandchild, REASON)]
    assert [e.job.state for e in events] == ["cancelled", "cancelled"]
    assert not EventAnnouncement.objects.exists()
    assert announce() == []  # claimed for good


def test_the_announcer_inserts_the_cancelled_follow_ups_with_its_claim(clean_hooks: Any) -> None:
    awa_django.on_cancelled_enqueue(Leg, on_cancelled_undo)
    parent = awa_django.enqueue(Leg("parent")).id
    chain_after(parent, "child")
    Client().cancel(parent)
    assert undone() == [("parent", "cancelled by operator")]  # the Client's, as before
    announce()
    assert undone() == [("parent", "cancelled by operator"), ("child", REASON)]
    announce()
    assert len(undone()) == 2  # once


def test_a_failing_builder_loses_its_follow_ups_not_the_events(
    clean_hooks: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(args: Leg, event: Cancelled[Leg]) -> list[Any]:
        if args.name == "bad":
            raise RuntimeError("template missing")
        return on_cancelled_undo(args, event)

    awa_django.on_cancelled_enqueue(Leg, broken)
    parent = awa_django.enqueue(Leg("parent")).id
    bad = awa_django.enqueue(Leg("bad"), after=[parent], on_parent_failure="cancel").id
    good = awa_django.enqueue(Leg("good"), after=[parent], on_parent_failure="cancel").id
    Client().cancel(parent)
    with caplog.at_level(logging.ERROR, logger="awa_django.worker"):
        events = announce()
    assert cancelled(events) == [(bad, REASON), (good, REASON)]
    assert ("good", REASON) in undone() and ("bad", REASON) not in undone()
    assert f"follow-up jobs of cancelled job {bad} were not enqueued" in caplog.text
    assert not EventAnnouncement.objects.exists()  # no poison row left to replay


def test_a_child_cancelled_at_enqueue_is_announced() -> None:
    parent = awa_django.enqueue(Leg("parent")).id
    Client().cancel(parent)
    (child,) = chain_after(parent, "late")
    assert Job.objects.get(id=child).state == "cancelled"
    assert cancelled(announce()) == [(child, REASON)]


def test_a_row_whose_job_is_gone_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    parent = awa_django.enqueue(Leg("parent")).id
    (child,) = chain_after(parent, "child")
    Client().cancel(parent)
    Job.objects.filter(id=child).delete()  # as pruning would, had no leader run for long
    with caplog.at_level(logging.WARNING, logger="awa_django.worker"):
        assert announce() == []
    assert f"job {child} is gone" in caplog.text
    assert not EventAnnouncement.objects.exists()


def test_the_announcer_works_through_a_backlog_in_bounded_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(announcer, "BATCH", 2)
    parent = awa_django.enqueue(Leg("parent")).id
    children = [
        awa_django.enqueue(Leg(f"c{i}"), after=[parent], on_parent_failure="cancel").id
        for i in range(5)
    ]
    Client().cancel(parent)
    assert sorted(job for job, _ in cancelled(announce())) == children


def test_two_announcers_at_once_announce_each_child_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(announcer, "BATCH", 3)
    parent = awa_django.enqueue(Leg("parent")).id
    children = [
        awa_django.enqueue(Leg(f"c{i}"), after=[parent], on_parent_failure="cancel").id
        for i in range(30)
    ]
    Client().cancel(parent)
    emitted: list[Event] = []

    async def both(db: Database) -> None:
        await asyncio.gather(*(Announcer(db, emitted.append).run_once() for _ in range(2)))

    with_db(both)
    assert sorted(job for job, _ in cancelled(emitted)) == children


# -- testing.drain() ------------------------------------------------------------------------
def test_drain_captures_the_cancelled_of_a_child_whose_parent_failed(clean_hooks: Any) -> None:
    awa_django.on_cancelled_enqueue(Leg, on_cancelled_undo)
    parent = awa_django.enqueue(Leg("parent", fail=True)).id
    child, grandchild = chain_after(parent, "child", "grandchild")
    with capture_events() as captured:
        assert drain(QUEUE) == 1
    assert captured.names() == ["Started", "Exhausted", "Cancelled", "Cancelled"]
    assert cancelled(captured.of_type(Cancelled)) == [(child, REASON), (grandchild, REASON)]
    assert undone() == [("child", REASON), ("grandchild", REASON)]
    assert not EventAnnouncement.objects.exists()


def test_drain_announces_a_child_cancelled_by_the_clients_cancel_of_its_parent() -> None:
    parent = awa_django.enqueue(Leg("parent")).id
    (child,) = chain_after(parent, "child")
    with capture_events() as captured:
        Client().cancel(parent)
        assert drain() == 0
    assert [(e.job.id, type(e).__name__) for e in captured] == [
        (parent, "Cancelled"),
        (child, "Cancelled"),
    ]


@pytest.mark.django_db  # a user's usual test: one transaction, rolled back at the end
def test_drain_in_a_test_transaction_delivers_the_cancelled_on_commit(
    django_capture_on_commit_callbacks: Any,
) -> None:
    parent = awa_django.enqueue(Leg("parent", fail=True)).id
    (child,) = chain_after(parent, "child")
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        drain(QUEUE)
    assert cancelled(captured.of_type(Cancelled)) == [(child, REASON)]
