"""Client callback resolution against PostgreSQL: every verb, every guard, every event.

Hooks run through `django_capture_on_commit_callbacks(execute=True)` here; that they run
only after a real commit is proven in test_client_hooks.py.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from typing import Any

import factory
import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.utils import timezone

import awa_django
from awa_django.client.callbacks import ResolveResult
from awa_django.client.client import Client
from awa_django.codec import MAX_ERROR_BYTES
from awa_django.events import Completed, Exhausted, Retried
from awa_django.exceptions import CallbackNotFound, InvalidCallbackOption, SerializationError
from awa_django.storage.models import ActiveLease, Job
from awa_django.storage.sql import callbacks as callbacks_sql
from testproject.shop.jobs import SendReceipt
from tests.factories import JobFactory, ModelFactory

pytestmark = pytest.mark.django_db

ALL_STATES = [
    "scheduled", "available", "running", "waiting_external",
    "retryable", "completed", "failed", "cancelled",
]  # fmt: skip


class ParkedJobFactory(JobFactory):
    """A job whose handler registered a callback and parked (waiting_external)."""

    state = "waiting_external"
    callback_id = factory.LazyFunction(uuid.uuid4)
    callback_timeout_at = factory.LazyFunction(lambda: timezone.now() + dt.timedelta(hours=1))
    attempt = 1
    run_lease = 1
    attempted_at = factory.LazyFunction(timezone.now)


class ActiveLeaseFactory(ModelFactory[ActiveLease]):
    class Meta:
        model = ActiveLease

    job_id = 0
    run_lease = 1
    queue = "default"
    worker_id = "worker-1"


def running_with_callback(**fields) -> Job:
    """A running attempt that registered a callback but has not parked yet: it holds a lease."""
    job = ParkedJobFactory(state="running", **fields)
    ActiveLeaseFactory(job_id=job.id, run_lease=job.run_lease, queue=job.queue)
    return job


def callback_of(job: Job) -> uuid.UUID:
    """The callback id of a job that registered one (`Job.callback_id` is nullable)."""
    assert job.callback_id is not None, f"job {job.id} has no callback"
    return job.callback_id


def snapshot(job: Job) -> dict[str, Any]:
    """Every column of the job's row as stored now, plus whether it has a lease."""
    row = Job.objects.filter(pk=job.pk).values().get()
    return {**row, "has_lease": ActiveLease.objects.filter(job_id=job.pk).exists()}


def db_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


@pytest.fixture
def client() -> Client:
    return Client()


@pytest.fixture
def events(clean_hooks):
    """Every event dispatched, via a global hook and a typed SendReceipt hook."""
    seen: list[Any] = []
    awa_django.on_any_event(seen.append)
    awa_django.on_event(SendReceipt, lambda e: seen.append(("typed", e.args)))
    return seen


@pytest.fixture
def resolve(django_capture_on_commit_callbacks):
    """Call a Client method and run the on-commit hooks it scheduled."""

    def call(method, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return method(*args, **kwargs)

    return call


# -- complete_external (T13) ---------------------------------------------------------------
@pytest.mark.parametrize("start", ["waiting_external", "running"])
def test_complete_external_completes_and_fires_completed(client, events, resolve, start):
    job = ParkedJobFactory(progress={"percent": 40}) if start == "waiting_external" else (
        running_with_callback(progress={"percent": 40})
    )  # fmt: skip
    row = resolve(client.complete_external, job.callback_id, {"ok": True})
    stored = snapshot(job)
    assert row.state == stored["state"] == "completed"
    assert stored["finalized_at"] is not None and stored["progress"] is None
    assert stored["callback_id"] is None and stored["callback_timeout_at"] is None
    assert stored["has_lease"] is False
    assert stored["result"] is None  # the payload is not stored
    [event, (tag, args)] = events
    assert type(event) is Completed and event.duration == dt.timedelta(0)
    assert event.job == row and event.job.state == "completed"
    assert event.args == {"order_id": job.args["order_id"]}
    assert tag == "typed" and args == SendReceipt(order_id=job.args["order_id"])


def test_resume_external_takes_over_a_lease_another_attempt_left(client, resolve):
    """Decision 030: an attempt without its own lease yet; a lease of an earlier attempt
    must not lend it that attempt's worker, claim time or deadline."""
    job = ParkedJobFactory(state="running", run_lease=5)
    long_ago = timezone.now() - dt.timedelta(hours=1)
    ActiveLeaseFactory(
        job_id=job.id, run_lease=4, worker_id="gone", claimed_at=long_ago, deadline_at=long_ago
    )
    resolve(client.resume_external, job.callback_id, None, run_lease=5)
    lease = ActiveLease.objects.get(job_id=job.id)
    assert (lease.run_lease, lease.worker_id, lease.deadline_at) == (5, "", None)
    assert lease.claimed_at == lease.heartbeat_at == db_now()


@pytest.mark.parametrize(
    "state", [s for s in ALL_STATES if s not in ("running", "waiting_external")]
)
def test_complete_external_rejects_jobs_in_other_states(client, events, resolve, state):
    job = ParkedJobFactory(state=state)  # a stale callback id left on the row
    before = snapshot(job)
    with pytest.raises(CallbackNotFound, match=str(job.callback_id)):
        resolve(client.complete_external, job.callback_id)
    assert snapshot(job) == before and events == []


def test_unknown_and_malformed_callback_ids_are_not_found(client, events):
    job = ParkedJobFactory()
    before = snapshot(job)
    unknown = uuid.uuid4()
    with pytest.raises(CallbackNotFound, match=str(unknown)):
        client.complete_external(unknown)
    with pytest.raises(CallbackNotFound, match="UUID"):
        client.complete_external("not-a-uuid")
    assert snapshot(job) == before and events == []


def test_run_lease_is_an_optional_extra_guard(client, resolve):
    job = ParkedJobFactory(run_lease=3)
    with pytest.raises(CallbackNotFound):
        resolve(client.complete_external, job.callback_id, run_lease=2)
    with pytest.raises(InvalidCallbackOption, match="run_lease"):
        resolve(client.complete_external, job.callback_id, run_lease="3")
    assert snapshot(job)["state"] == "waiting_external"
    assert resolve(client.complete_external, str(job.callback_id), run_lease=3).state == (
        "completed"
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("complete_external", "complete_external"),
        ("complete_external", "fail_external"),
        ("fail_external", "resume_external"),
        ("resume_external", "complete_external"),
        ("retry_external", "retry_external"),
        ("retry_external", "heartbeat_callback"),
    ],
)
def test_a_callback_resolves_at_most_once(client, events, resolve, first, second):
    job = ParkedJobFactory()
    calls = {
        "complete_external": lambda: client.complete_external(job.callback_id),
        "fail_external": lambda: client.fail_external(job.callback_id, "declined"),
        "retry_external": lambda: client.retry_external(job.callback_id),
        "resume_external": lambda: client.resume_external(job.callback_id, {"n": 1}),
        "heartbeat_callback": lambda: client.heartbeat_callback(job.callback_id, 60),
    }
    resolve(calls[first])
    after_first, events_after_first = snapshot(job), list(events)
    with pytest.raises(CallbackNotFound, match=second):
        resolve(calls[second])
    assert snapshot(job) == after_first and events == events_after_first


# -- fail_external (T14) -------------------------------------------------------------------
@pytest.mark.parametrize("start", ["waiting_external", "running"])
def test_fail_external_fails_for_good_and_fires_exhausted(client, events, resolve, start):
    fields = {"attempt": 2, "errors": [{"error": "earlier", "attempt": 1, "at": "x"}],
              "progress": {"percent": 10}}  # fmt: skip
    job = ParkedJobFactory(**fields) if start == "waiting_external" else (
        running_with_callback(**fields)
    )  # fmt: skip
    row = resolve(client.fail_external, job.callback_id, "card declined")
    stored = snapshot(job)
    assert row.state == stored["state"] == "failed"
    assert stored["finalized_at"] is not None and stored["callback_id"] is None
    assert stored["progress"] == {"percent": 10} and stored["has_lease"] is False
    assert stored["errors"][0]["error"] == "earlier"
    entry = stored["errors"][1]
    assert entry["error"] == "card declined" and entry["attempt"] == 2
    assert entry["terminal"] is True and entry["at"]
    [event, _typed] = events
    assert type(event) is Exhausted and event.job.state == "failed"
    assert event.error == "card declined" and event.attempt == 2


@pytest.mark.parametrize(
    "state", [s for s in ALL_STATES if s not in ("running", "waiting_external")]
)
def test_fail_external_rejects_jobs_in_other_states(client, events, resolve, state):
    job = ParkedJobFactory(state=state)
    before = snapshot(job)
    with pytest.raises(CallbackNotFound):
        resolve(client.fail_external, job.callback_id, "x")
    assert snapshot(job) == before and events == []


@pytest.mark.parametrize(
    "error", ["", "   ", None, 42, "nul\x00byte", "lone \ud800 surrogate", "\udfff"]
)
def test_fail_external_needs_a_real_error_text(client, events, resolve, error):
    job = ParkedJobFactory()
    before = snapshot(job)
    with pytest.raises(InvalidCallbackOption, match="error"):
        resolve(client.fail_external, job.callback_id, error)
    assert snapshot(job) == before and events == []


def test_fail_external_cuts_a_long_error_to_max_error_bytes(client, events, resolve):
    job = ParkedJobFactory()
    row = resolve(client.fail_external, job.callback_id, "x" * (3 * MAX_ERROR_BYTES))
    stored = snapshot(job)["errors"][-1]["error"]
    assert len(stored.encode()) <= MAX_ERROR_BYTES and stored.startswith("x" * 1000)
    assert "truncated" in stored and row.state == "failed"
    assert [e.error for e in events if not isinstance(e, tuple)] == [stored]


# -- retry_external (T15) ------------------------------------------------------------------
def test_retry_external_makes_the_job_available_and_fires_retried(client, events, resolve):
    job = ParkedJobFactory(attempt=3, run_lease=4, run_at=timezone.now() - dt.timedelta(days=1),
                           errors=[{"error": "e", "attempt": 2, "at": "x"}])  # fmt: skip
    row = resolve(client.retry_external, job.callback_id)
    stored = snapshot(job)
    assert row.state == stored["state"] == "available"
    assert stored["attempt"] == 0 and stored["run_lease"] == 4 and len(stored["errors"]) == 1
    assert stored["finalized_at"] is None and stored["callback_id"] is None
    assert stored["callback_timeout_at"] is None
    assert stored["run_at"] == db_now()  # now() of this (test) transaction
    [event, _typed] = events
    assert type(event) is Retried and event.job.state == "available"
    assert event.attempt == 3 and event.error == "" and event.next_run_at == row.run_at


@pytest.mark.parametrize("state", [s for s in ALL_STATES if s != "waiting_external"])
def test_retry_external_accepts_only_parked_jobs(client, events, resolve, state):
    job = running_with_callback() if state == "running" else ParkedJobFactory(state=state)
    before = snapshot(job)
    with pytest.raises(CallbackNotFound):
        resolve(client.retry_external, job.callback_id)
    assert snapshot(job) == before and events == []


# -- resume_external (T12) -----------------------------------------------------------------
def test_resume_external_hands_the_payload_over_and_fires_nothing(client, events, resolve):
    job = ParkedJobFactory(metadata={"tenant": "acme"})
    row = resolve(client.resume_external, job.callback_id, {"approved": True})
    stored = snapshot(job)
    assert row.state == stored["state"] == "running"
    # The payload waits in its own column: the user's metadata is left as it was.
    assert stored["metadata"] == {"tenant": "acme"}
    assert stored["callback_result"] == {"approved": True}
    assert stored["callback_id"] is None and stored["callback_timeout_at"] is None
    assert events == []
    # A parked job has no lease: resume gives it an unowned one, so that if no handler
    # waits for it the stale-heartbeat rescue re-runs it instead of leaving it running.
    lease = ActiveLease.objects.get(job_id=job.id)
    assert (lease.run_lease, lease.worker_id, lease.deadline_at) == (1, "", None)


def test_resume_external_of_a_running_attempt_refreshes_its_own_lease(client, resolve):
    job = running_with_callback(run_lease=5)
    ActiveLease.objects.filter(job_id=job.id).update(
        heartbeat_at=timezone.now() - dt.timedelta(minutes=5)
    )
    resolve(client.resume_external, job.callback_id, None, run_lease=5)
    lease = ActiveLease.objects.get(job_id=job.id)
    assert lease.worker_id == "worker-1" and lease.run_lease == 5
    assert lease.heartbeat_at == db_now()
    # A None payload is stored as JSON null: still "a payload is pending" for the handler.
    assert snapshot(job)["metadata"] == {}
    assert Job.objects.filter(id=job.id, callback_result__isnull=False).exists()


@pytest.mark.parametrize(
    "state", [s for s in ALL_STATES if s not in ("running", "waiting_external")]
)
def test_resume_external_rejects_jobs_in_other_states(client, resolve, state):
    job = ParkedJobFactory(state=state)
    before = snapshot(job)
    with pytest.raises(CallbackNotFound):
        resolve(client.resume_external, job.callback_id, {})
    assert snapshot(job) == before


@pytest.mark.parametrize(
    ("payload", "problem"),
    [({"when": object()}, "cannot be serialised"), ({"k": "\ud800"}, "lone surrogate"),
     (["\x00"], "NUL")],
)  # fmt: skip
def test_resume_external_rejects_a_payload_that_is_not_storable_json(
    client, resolve, payload, problem
):
    job = ParkedJobFactory()
    before = snapshot(job)
    with pytest.raises(SerializationError, match=problem):
        resolve(client.resume_external, job.callback_id, payload)
    assert snapshot(job) == before


# -- heartbeat_callback --------------------------------------------------------------------
@pytest.mark.parametrize("timeout", [0, 90, 2.5, dt.timedelta(minutes=3)])
def test_heartbeat_callback_extends_the_timeout_on_the_database_clock(client, events, timeout):
    job = ParkedJobFactory(callback_timeout_at=timezone.now() + dt.timedelta(seconds=5))
    row = client.heartbeat_callback(job.callback_id, timeout)
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
    assert row.callback_timeout_at == db_now() + dt.timedelta(seconds=seconds)
    assert snapshot(job)["callback_timeout_at"] == row.callback_timeout_at
    assert row.state == "waiting_external" and row.callback_id == job.callback_id
    assert events == []


def test_heartbeat_callback_defaults_to_an_hour(client):
    job = ParkedJobFactory()
    assert client.heartbeat_callback(job.callback_id).callback_timeout_at == (
        db_now() + dt.timedelta(hours=1)
    )


@pytest.mark.parametrize("state", [s for s in ALL_STATES if s != "waiting_external"])
def test_heartbeat_callback_accepts_only_parked_jobs(client, state):
    job = running_with_callback() if state == "running" else ParkedJobFactory(state=state)
    before = snapshot(job)
    with pytest.raises(CallbackNotFound):
        client.heartbeat_callback(job.callback_id, 60)
    assert snapshot(job) == before


@pytest.mark.parametrize("timeout", [-1, math.nan, math.inf, -math.inf, "60", True, None, 1e12])
def test_heartbeat_callback_rejects_bad_timeouts(client, timeout):
    job = ParkedJobFactory()
    before = snapshot(job)
    with pytest.raises(InvalidCallbackOption, match="timeout"):
        client.heartbeat_callback(job.callback_id, timeout)
    assert isinstance(InvalidCallbackOption(), ValueError)
    assert snapshot(job) == before


# -- resolve_callback ----------------------------------------------------------------------
def test_resolve_callback_complete(client, events, resolve):
    job = ParkedJobFactory()
    result = resolve(client.resolve_callback, job.callback_id, {"ok": 1}, "complete")
    assert result == ResolveResult(outcome="complete", job=result.job, payload={"ok": 1})
    assert result.job.state == snapshot(job)["state"] == "completed"
    assert [type(e) for e in events if not isinstance(e, tuple)] == [Completed]


def test_resolve_callback_fail(client, events, resolve):
    job = running_with_callback()
    result = resolve(client.resolve_callback, job.callback_id, None, "fail")
    assert result.outcome == "fail" and result.job.state == "failed"
    assert result.job.errors[-1]["error"] == "callback failed: default action"
    assert snapshot(job)["has_lease"] is False
    [event, _typed] = events
    assert type(event) is Exhausted and event.error == "callback failed: default action"


def test_resolve_callback_ignore_changes_nothing_and_fires_nothing(client, events, resolve):
    job = ParkedJobFactory()
    before = snapshot(job)
    result = resolve(client.resolve_callback, job.callback_id, {"x": 1})
    assert result.outcome == "ignore" and result.payload == {"x": 1}
    assert result.job.state == "waiting_external" and result.job.callback_id == job.callback_id
    assert snapshot(job) == before and events == []
    # still pending: a later resolution works
    assert resolve(client.complete_external, job.callback_id).state == "completed"


def test_resolve_callback_guards(client, resolve):
    job = ParkedJobFactory(state="completed")
    with pytest.raises(CallbackNotFound):
        resolve(client.resolve_callback, job.callback_id, None, "complete")
    with pytest.raises(CallbackNotFound):
        resolve(client.resolve_callback, uuid.uuid4(), None, "ignore")
    parked = ParkedJobFactory(run_lease=2)
    with pytest.raises(CallbackNotFound):
        resolve(client.resolve_callback, parked.callback_id, None, "complete", run_lease=1)
    with pytest.raises(InvalidCallbackOption, match="default_action"):
        resolve(client.resolve_callback, parked.callback_id, None, "retry")
    assert snapshot(parked)["state"] == "waiting_external"


# -- async twins ---------------------------------------------------------------------------
def test_async_twins_run_the_same_operations(client, events, resolve):
    jobs = [ParkedJobFactory() for _ in range(6)]
    ids = [j.callback_id for j in jobs]
    with_hooks = resolve
    assert with_hooks(async_to_sync(client.acomplete_external), ids[0]).state == "completed"
    assert with_hooks(async_to_sync(client.afail_external), ids[1], "no").state == "failed"
    assert with_hooks(async_to_sync(client.aretry_external), ids[2]).state == "available"
    assert with_hooks(async_to_sync(client.aresume_external), ids[3], 1).state == "running"
    row = async_to_sync(client.aheartbeat_callback)(ids[4], 10)
    assert row.callback_timeout_at == db_now() + dt.timedelta(seconds=10)
    result = with_hooks(async_to_sync(client.aresolve_callback), ids[5], None, "complete")
    assert result.job.state == "completed"
    assert [type(e) for e in events if not isinstance(e, tuple)] == [
        Completed, Exhausted, Retried, Completed,
    ]  # fmt: skip
    with pytest.raises(CallbackNotFound):
        async_to_sync(client.acomplete_external)(ids[0])


# -- the statements use the callback index -------------------------------------------------
STATEMENTS = [
    callbacks_sql.JOB_COMPLETE_EXTERNAL,
    callbacks_sql.JOB_FAIL_EXTERNAL,
    callbacks_sql.JOB_RETRY_EXTERNAL,
    callbacks_sql.JOB_RESUME_EXTERNAL,
    callbacks_sql.JOB_HEARTBEAT_CALLBACK,
    callbacks_sql.JOB_LOCK_BY_CALLBACK,
]


def test_each_statement_finds_its_job_through_the_callback_index():
    # Enough parked jobs, analysed, that a scan of every waiting_external row would cost
    # more than one probe of the callback index: each plan must pick the probe.
    Job.objects.bulk_create(
        Job(kind="send_receipt", args={}, state="waiting_external", callback_id=uuid.uuid4())
        for _ in range(2000)
    )
    params = {"callback_id": uuid.uuid4(), "run_lease": None, "error": "e",
              "payload": "{}", "timeout_seconds": 1.0,
              "dead_letter_queues": ["dlq"]}  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_jobs_hot")
        for statement in STATEMENTS:
            cursor.execute("EXPLAIN " + statement.sql, params)
            plan = "\n".join(r[0] for r in cursor.fetchall())
            assert "awa_jobs_callback_uniq" in plan, (statement.name, plan)
            assert "Seq Scan on awa_jobs_hot" not in plan, (statement.name, plan)
