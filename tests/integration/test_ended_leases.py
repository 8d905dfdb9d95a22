"""A heartbeat that runs while an attempt's outcome is written leaves no lease behind
(decision 033): the outcome's statement deletes only the lease its snapshot sees, so the
heartbeat removes what it wrote for an attempt that was ending, once the outcome committed,
and never a lease that still guards something."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import psycopg
import pytest

from awa_django.execution.context import JobContext
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job
from awa_django.storage.query import Query
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.database import Database
from awa_django.worker.heartbeat import Heartbeat
from awa_django.worker.inflight import InFlight
from tests.factories import JobFactory as BaseJobFactory

pytestmark = pytest.mark.django_db(transaction=True)
Q = "core-ended"


class JobFactory(BaseJobFactory):
    kind = "core_ended"
    queue = Q


@pytest.fixture
def db() -> Iterator[Database]:
    yield Database("default", "awa-test-ended", max_size=1)


def claim(*, lease_now: bool = False) -> JobSnapshot:
    """One attempt; its lease is the first heartbeat's to write (decision 030)."""
    query = jobs_sql.job_claim_many(
        lease_now=lease_now, queue=Q, limit=1, worker_id="w-ended", deadline_seconds=0
    )
    [row] = query.run("default")
    return row


def completion(row: JobSnapshot) -> Query[dict[int, dt.datetime]]:
    return jobs_sql.job_complete_many_lean(ids=[row.id], leases=[row.run_lease], results=[None])


def leases(row: JobSnapshot) -> list[int]:
    return list(ActiveLease.objects.filter(job_id=row.id).values_list("run_lease", flat=True))


def wait_for(condition: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.01)
    return False


def test_a_beat_beside_an_outcome_leaves_no_lease_once_the_outcome_committed(
    db: Database,
) -> None:
    JobFactory()
    row = claim()
    inflight = InFlight()
    job: JobContext[object] = JobContext(row, None)
    inflight.add(job)
    inflight.ending(job)  # the handler returned; the completer writes its outcome
    heartbeat = Heartbeat(db, inflight, interval=60)
    with psycopg.connect(**{**db.kwargs, "autocommit": False}) as completer:
        # The outcome's statement runs (and finds no lease) before the beat commits...
        assert list(completion(row).run_on(completer)) == [row.id]
        assert heartbeat.run_once() == 1  # ...whose snapshot still saw the job running.
        completer.commit()
    inflight.remove(job)  # the outcome committed
    assert Job.objects.get(id=row.id).state == "completed"
    assert leases(row) == [row.run_lease]  # the late lease: nobody else would remove it
    heartbeat.start()
    try:
        assert wait_for(lambda: not leases(row), timeout=2), "the late lease stayed"
    finally:
        heartbeat.stop()
        heartbeat.close()
    assert heartbeat.ending == set()


def test_a_beat_before_an_attempt_ends_leaves_its_lease_to_the_outcome(db: Database) -> None:
    JobFactory()
    row = claim()
    inflight = InFlight()
    job: JobContext[object] = JobContext(row, None)
    inflight.add(job)
    heartbeat = Heartbeat(db, inflight, interval=60)
    try:
        assert heartbeat.run_once() == 1
        assert leases(row) == [row.run_lease]
        assert heartbeat.ending == set()  # nothing to look at again: no extra statement
        inflight.ending(job)
        with psycopg.connect(**db.kwargs) as completer:
            completion(row).run_on(completer)
        inflight.remove(job)
        assert leases(row) == []
    finally:
        heartbeat.stop()
        heartbeat.close()


def test_a_lease_that_still_guards_an_attempt_stays(db: Database) -> None:
    """An outcome given up at a forced stop leaves the attempt running for rescue, which
    reads its lease; a later attempt's lease is never the old one's to delete."""
    JobFactory.create_batch(2)
    given_up, reclaimed = claim(), claim()
    inflight = InFlight()
    contexts: list[JobContext[object]] = [JobContext(given_up, None), JobContext(reclaimed, None)]
    for job in contexts:
        inflight.add(job)
        inflight.ending(job)
    heartbeat = Heartbeat(db, inflight, interval=60)
    try:
        assert heartbeat.run_once() == 2
        Job.objects.filter(id=reclaimed.id).update(state="available")
        again = claim(lease_now=True)  # the next attempt, its lease written by the claim
        assert again.id == reclaimed.id and again.run_lease > reclaimed.run_lease
        for job in contexts:
            inflight.remove(job)
        assert heartbeat.sweep() == 0
    finally:
        heartbeat.stop()
        heartbeat.close()
    assert leases(given_up) == [given_up.run_lease]
    assert leases(reclaimed) == [again.run_lease]
    assert heartbeat.ending == set()
