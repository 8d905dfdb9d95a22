"""Concurrent resolutions of one callback: each race ends in exactly one outcome and at most
one event (exactly one where the outcome has an event).

The interleavings are forced, not hoped for: one side holds the row lock in an open
transaction, the other is started and observed (pg_stat_activity) blocking on that lock,
then the first commits. Free-running versions with a barrier run as well.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections, transaction
from django.utils import timezone

import awa_django
from awa_django.client.client import Client
from awa_django.events import Cancelled, Completed, Event
from awa_django.exceptions import CallbackNotFound
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql import transitions
from tests.integration.test_callbacks import ParkedJobFactory, callback_of, running_with_callback
from tests.integration.test_client_hooks import raw_connection

pytestmark = pytest.mark.django_db(transaction=True)


class Racer:
    """Runs `call` in its own thread (so on its own Django connection) and keeps the result
    or the exception; closes the thread's connections when done."""

    def __init__(self, call: Callable[[], Any], barrier: threading.Barrier | None = None):
        self.value: Any = None
        self.error: BaseException | None = None
        self._call, self._barrier = call, barrier
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self._barrier:
                self._barrier.wait(timeout=10)
            self.value = self._call()
        except BaseException as exc:
            self.error = exc
        finally:
            connections.close_all()

    def join(self) -> Racer:
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "racer did not finish"
        return self


def wait_for_lock_waiters(count: int) -> None:
    """Until `count` backends of the test database wait on a lock (deadline 10 s)."""
    deadline = time.monotonic() + 10
    with raw_connection() as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            assert row is not None
            if row[0] >= count:
                return
            time.sleep(0.01)
    raise AssertionError(f"expected {count} backend(s) blocked on the row lock")


@pytest.fixture
def events(clean_hooks) -> list[Event]:
    seen: list[Event] = []
    awa_django.on_any_event(seen.append)
    return seen


def state_of(job: Job) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


def rescue_expired(conn) -> list[int]:
    query = maintenance_sql.job_rescue_expired_callback(limit=500, message="callback timed out")
    rows = conn.execute(query.statement.sql, query.params)
    return [r[0] for r in rows.fetchall()]


def expired_parked_job() -> Job:
    return ParkedJobFactory(callback_timeout_at=timezone.now() - dt.timedelta(seconds=1))


def one_winner(racers: list[Racer]) -> JobSnapshot:
    """Exactly one racer got a row; every other got CallbackNotFound."""
    winners = [r.value for r in racers if r.error is None]
    losers = [r.error for r in racers if r.error is not None]
    assert len(winners) == 1, [r.error for r in racers]
    assert all(isinstance(e, CallbackNotFound) for e in losers), losers
    return winners[0]


# A racer's call, bound to one job (a lambda in a loop would see the loop's last job).
def completing(job: Job) -> Callable[[], JobSnapshot]:
    return lambda: Client().complete_external(callback_of(job))


def resuming(job: Job, payload: Any) -> Callable[[], JobSnapshot]:
    return lambda: Client().resume_external(callback_of(job), payload)


def cancelling(job: Job) -> Callable[[], JobSnapshot | None]:
    return lambda: Client().cancel(job.id)


# -- two concurrent complete_external ---------------------------------------------------
def test_two_complete_external_blocked_on_the_same_row_complete_it_once(events):
    job = ParkedJobFactory()
    with raw_connection() as locker, locker.transaction():
        locker.execute("SELECT 1 FROM awa_jobs_hot WHERE id = %s FOR UPDATE", (job.id,))
        racers = [Racer(lambda: Client().complete_external(callback_of(job))) for _ in range(2)]
        wait_for_lock_waiters(2)
    winner = one_winner([r.join() for r in racers])
    assert winner.state == state_of(job) == "completed"
    assert [type(e) for e in events] == [Completed]


def test_two_free_running_complete_external_complete_it_once(events):
    for _ in range(5):
        job = ParkedJobFactory()
        barrier = threading.Barrier(2)
        racers = [Racer(completing(job), barrier) for _ in range(2)]
        one_winner([r.join() for r in racers])
        assert state_of(job) == "completed"
    assert [type(e) for e in events] == [Completed] * 5


# -- complete_external vs the callback-timeout rescue ------------------------------------
def test_rescue_first_then_complete_external_finds_nothing(events):
    job = expired_parked_job()
    with raw_connection() as leader, leader.transaction():
        assert rescue_expired(leader) == [job.id]
        racer = Racer(lambda: Client().complete_external(callback_of(job)))
        wait_for_lock_waiters(1)
    assert isinstance(racer.join().error, CallbackNotFound)
    assert state_of(job) == "retryable" and events == []


def test_complete_external_first_then_the_rescue_skips_the_job(events):
    job = expired_parked_job()
    with raw_connection() as leader:
        with transaction.atomic():
            Client().complete_external(callback_of(job))
            assert rescue_expired(leader) == []  # SKIP LOCKED: no wait, no rescue
        assert rescue_expired(leader) == []  # committed: nothing left to rescue
    assert state_of(job) == "completed"
    assert [type(e) for e in events] == [Completed]


def test_free_running_complete_external_and_rescue_have_one_outcome(events):
    for _ in range(5):
        job = expired_parked_job()
        barrier = threading.Barrier(2)
        with raw_connection() as leader:
            completer = Racer(completing(job), barrier)
            barrier.wait(timeout=10)
            rescued = rescue_expired(leader)
            completer.join()
        completed = [e for e in events if e.job.id == job.id]
        # Exactly one side applied: the rescued row (leader's Rescued event) or Completed.
        assert len(rescued) + len(completed) == 1, (rescued, completed, completer.error)
        assert state_of(job) == ("retryable" if rescued else "completed")
        if rescued:
            assert isinstance(completer.error, CallbackNotFound)


# -- complete_external before the handler parked -----------------------------------------
def park(conn, job: Job) -> list[tuple[Any, ...]]:
    """The worker's park write (T11) for the job's attempt, on a connection of its own."""
    query = jobs_sql.job_set_state_if_running(
        id=job.id, run_lease=job.run_lease, move=transitions.PARK, callback_id=job.callback_id
    )
    return conn.execute(query.statement.sql, query.params).fetchall()


def test_complete_external_before_the_park_makes_the_park_stale(events):
    job = running_with_callback()
    row = Client().complete_external(callback_of(job))
    assert row.state == "completed" and not ActiveLease.objects.filter(job_id=job.id).exists()
    with raw_connection() as worker:
        assert park(worker, job) == []
    assert state_of(job) == "completed"
    assert [type(e) for e in events] == [Completed]


def test_a_park_blocked_behind_complete_external_matches_nothing(events):
    job = running_with_callback()
    with raw_connection() as worker:
        with transaction.atomic():
            Client().complete_external(callback_of(job))
            parker = Racer(lambda: park(worker, job))
            wait_for_lock_waiters(1)
        assert parker.join().error is None and parker.value == []
    assert state_of(job) == "completed"
    assert [type(e) for e in events] == [Completed]


# -- resume_external vs Client.cancel ----------------------------------------------------
def test_cancel_first_then_resume_finds_nothing(events):
    job = ParkedJobFactory()
    with transaction.atomic():
        Client().cancel(job.id)
        resumer = Racer(lambda: Client().resume_external(callback_of(job), {"ok": True}))
        wait_for_lock_waiters(1)
    assert isinstance(resumer.join().error, CallbackNotFound)
    assert state_of(job) == "cancelled"
    assert [type(e) for e in events] == [Cancelled]


def test_resume_first_then_cancel_cancels_the_resumed_attempt(events):
    job = ParkedJobFactory()
    with transaction.atomic():
        Client().resume_external(callback_of(job), {"ok": True})
        canceller = Racer(lambda: Client().cancel(job.id))
        wait_for_lock_waiters(1)
    assert canceller.join().error is None and canceller.value.state == "cancelled"
    assert state_of(job) == "cancelled"
    assert not ActiveLease.objects.filter(job_id=job.id).exists()  # resume's lease is gone
    assert [type(e) for e in events] == [Cancelled]


def test_free_running_resume_and_cancel_end_cancelled_with_one_event(events):
    for _ in range(5):
        job = ParkedJobFactory()
        barrier = threading.Barrier(2)
        resumer = Racer(resuming(job, 1), barrier)
        canceller = Racer(cancelling(job), barrier)
        resumer.join(), canceller.join()
        assert canceller.error is None and canceller.value.state == "cancelled"
        assert resumer.error is None or isinstance(resumer.error, CallbackNotFound)
        assert state_of(job) == "cancelled"
        assert not ActiveLease.objects.filter(job_id=job.id).exists()
    assert [type(e) for e in events] == [Cancelled] * 5
