"""Operator actions on real PostgreSQL: `Client.cancel` (T19) and `Client.retry` (T21).
A cancelled attempt loses its lease, its worker hears `awa_cancel`, and whatever that
attempt reports later is stale."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import factory
import pytest
from django.utils import timezone

import awa_django
from awa_django.channels import CANCEL_CHANNEL, channel_for
from awa_django.events import Cancelled
from awa_django.execution.inline import run_available
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import transitions
from awa_django.testing import capture_events
from tests.factories import JobFactory as BaseJobFactory
from tests.listening import Listener

pytestmark = pytest.mark.django_db

Q = "core-cancel"


class JobFactory(BaseJobFactory):
    kind = "core_cancel_plain"
    queue = Q
    # The model's db_default is statement_timestamp(), later than this transaction's now().
    run_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=1))


@dataclass
class CoreCancelSelf:
    note: str


@awa_django.job(CoreCancelSelf, queue=Q)
def core_cancel_self(job: awa_django.JobContext[CoreCancelSelf]) -> None:
    # An operator cancels the job while this attempt runs; the attempt then "succeeds".
    awa_django.Client().cancel(job.id)


def claim() -> JobSnapshot:
    query = jobs_sql.job_claim_many(
        lease_now=True, queue=Q, limit=1, worker_id="w1", deadline_seconds=60
    )
    (row,) = query.run("default")
    return row


def running() -> JobSnapshot:
    JobFactory()
    return claim()


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener(CANCEL_CHANNEL, channel_for(Q))
    yield listening
    listening.conn.close()


# -- cancel -------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_running_job_drops_its_lease_and_notifies_its_worker(
    listener: Listener,
) -> None:
    row = running()
    with capture_events() as captured:
        cancelled = awa_django.Client().cancel(row.id)
    assert cancelled is not None
    assert (cancelled.state, cancelled.run_lease, cancelled.errors) == ("cancelled", 1, [])
    assert cancelled.finalized_at is not None
    assert not ActiveLease.objects.filter(job_id=row.id).exists()
    notify = listener.next()
    assert notify is not None and notify.channel == CANCEL_CHANNEL
    assert json.loads(notify.payload) == {"job_id": row.id, "run_lease": row.run_lease}
    (event,) = captured.events
    assert isinstance(event, Cancelled)
    assert (event.job.id, event.reason) == (row.id, "cancelled by operator")


@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_queued_job_sends_no_cancel_notify(listener: Listener) -> None:
    job = JobFactory()
    assert awa_django.Client().cancel(job.id) is not None
    assert Job.objects.get(id=job.id).state == "cancelled"
    listener.assert_nothing_pending(CANCEL_CHANNEL)


@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_parked_job_clears_its_callback_and_notifies(listener: Listener) -> None:
    job = JobFactory(
        state="waiting_external",
        attempt=1,
        run_lease=4,
        callback_id=uuid.uuid4(),
        callback_timeout_at=timezone.now() + dt.timedelta(hours=1),
    )
    cancelled = awa_django.Client().cancel(job.id)
    assert cancelled is not None
    assert (cancelled.state, cancelled.callback_id, cancelled.callback_timeout_at) == (
        "cancelled",
        None,
        None,
    )
    notify = listener.next()
    assert notify is not None
    assert json.loads(notify.payload) == {"job_id": job.id, "run_lease": 4}


def test_later_outcomes_of_a_cancelled_attempt_are_stale() -> None:
    row = running()
    awa_django.Client().cancel(row.id)
    before = Job.objects.filter(id=row.id).values().get()
    completed = jobs_sql.job_complete_many(ids=[row.id], leases=[row.run_lease], results=[None])
    retried = jobs_sql.job_set_state_if_running(
        id=row.id, run_lease=row.run_lease, move=transitions.RETRY_LATER, error="late"
    )
    assert completed.run("default") == []
    assert retried.run("default") is None
    assert Job.objects.filter(id=row.id).values().get() == before


def test_an_attempt_cancelled_while_it_runs_cannot_complete(
    django_capture_on_commit_callbacks: Any,
) -> None:
    job_id = awa_django.enqueue(CoreCancelSelf(note="x")).id
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        assert run_available(Q) == 1
    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("cancelled", 1)
    assert captured.names() == ["Started", "Cancelled"]  # no Completed for the stale outcome


@pytest.mark.parametrize("state", ["completed", "failed", "cancelled"])
def test_cancel_of_a_terminal_job_is_none_and_changes_nothing(state: str) -> None:
    job = JobFactory(state=state, finalized_at=timezone.now())
    before = Job.objects.filter(id=job.id).values().get()
    assert awa_django.Client().cancel(job.id) is None
    assert Job.objects.filter(id=job.id).values().get() == before


def test_cancel_of_an_unknown_job_is_none() -> None:
    assert awa_django.Client().cancel(987654321) is None


def test_cancel_many_moves_every_non_terminal_job(
    django_capture_on_commit_callbacks: Any,
) -> None:
    ids = [JobFactory(state=s).id for s in ("available", "scheduled", "retryable", "completed")]
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        cancelled = awa_django.Client().cancel_many([*ids, ids[0], 987654321])
    assert sorted(r.id for r in cancelled) == sorted(ids[:3])
    assert sorted(e.job.id for e in captured.of_type(Cancelled)) == sorted(ids[:3])


# -- retry --------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_retry_of_a_failed_job_resets_attempts_keeps_errors_and_wakes_the_queue(
    listener: Listener,
) -> None:
    errors = [{"error": "boom", "attempt": 3, "at": "2030-01-01T00:00:00+00:00"}]
    job = JobFactory(
        state="failed", attempt=3, max_attempts=3, run_lease=3, errors=errors,
        finalized_at=timezone.now(), progress={"p": 1},
    )  # fmt: skip
    row = awa_django.Client().retry(job.id)
    assert row is not None
    assert (row.state, row.attempt, row.run_lease, row.errors) == ("available", 0, 3, errors)
    assert (row.finalized_at, row.progress) == (None, {"p": 1})
    notify = listener.next()
    assert notify is not None and notify.channel == channel_for(Q)
    # ... and it runs again with a fresh attempt budget.
    assert claim().attempt == 1


def test_retry_of_a_cancelled_job() -> None:
    job = JobFactory(state="cancelled", attempt=1, run_lease=1, finalized_at=timezone.now())
    row = awa_django.Client().retry(job.id)
    assert row is not None and (row.state, row.attempt) == ("available", 0)


def test_retry_of_a_parked_job_clears_its_callback() -> None:
    job = JobFactory(
        state="waiting_external",
        attempt=2,
        run_lease=2,
        callback_id=uuid.uuid4(),
        callback_timeout_at=timezone.now() + dt.timedelta(hours=1),
    )
    row = awa_django.Client().retry(job.id)
    assert row is not None
    assert (row.state, row.attempt, row.callback_id) == ("available", 0, None)


def test_retry_of_a_retryable_job_runs_it_now_with_a_fresh_budget() -> None:
    errors = [{"error": "boom", "attempt": 2, "at": "2030-01-01T00:00:00+00:00"}]
    later = timezone.now() + dt.timedelta(hours=1)
    job = JobFactory(state="retryable", attempt=2, run_lease=2, errors=errors, run_at=later)
    row = awa_django.Client().retry(job.id)
    assert row is not None
    assert (row.state, row.attempt, row.errors) == ("available", 0, errors)
    assert row.run_at < later


@pytest.mark.parametrize("state", ["available", "scheduled", "completed"])
def test_retry_refuses_other_states(state: str) -> None:
    job = JobFactory(state=state, attempt=1)
    before = Job.objects.filter(id=job.id).values().get()
    assert awa_django.Client().retry(job.id) is None
    assert Job.objects.filter(id=job.id).values().get() == before


def test_retry_refuses_a_running_job() -> None:
    row = running()
    assert awa_django.Client().retry(row.id) is None
    assert Job.objects.get(id=row.id).state == "running"
    assert ActiveLease.objects.filter(job_id=row.id).exists()


def test_retry_many_returns_only_the_jobs_it_moved() -> None:
    failed = JobFactory(state="failed", attempt=1)
    done = JobFactory(state="completed", attempt=1)
    rows = awa_django.Client().retry_many([failed.id, done.id, failed.id, 987654321])
    assert [r.id for r in rows] == [failed.id]


@pytest.mark.parametrize("huge", [2**63, -(2**63) - 1, 10**30])
def test_an_id_beyond_a_bigint_names_no_job_for_cancel_and_retry(huge: int) -> None:
    # It reached the driver as a DataError, cascade's descendant walk included.
    client = awa_django.Client()
    job = JobFactory(state="failed")
    assert client.cancel(huge) is None
    assert client.cancel(huge, cascade=True) is None
    assert client.retry(huge) is None
    assert [r.id for r in client.retry_many([huge, job.pk])] == [job.pk]
    assert [r.id for r in client.cancel_many([job.pk, huge])] == [job.pk]
