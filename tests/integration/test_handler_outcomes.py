"""Every handler outcome of DESIGN §5, run through `awa_django.execution.inline.run_available()`
on real PostgreSQL: the state, columns, error entries and events each one leaves behind.

Tests run inside one transaction, so `now()` is the same instant for every statement:
intervals such as `run_at - finalized_at` are exact, not approximate.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import factory
import pytest
from django.db import DataError, connection, transaction
from django.db.models import F
from django.utils import timezone

import awa_django
from awa_django.events import Cancelled, Completed, Exhausted, Retried, Started
from awa_django.exceptions import TerminalError
from awa_django.execution.inline import run_available
from awa_django.results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa_django.storage.models import ActiveLease, Job
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.testing import capture_events
from tests.factories import JobFactory as BaseJobFactory

pytestmark = pytest.mark.django_db

QUEUE = "core-outcomes"
CALLS: list[tuple[int, int]] = []  # (job id, attempt) of every handler call


class CoreOutcomeBoom(Exception):
    pass


@dataclass
class CoreOutcome:
    mode: str
    seconds: float = 0.0
    note: str = ""


@awa_django.job(CoreOutcome, queue=QUEUE, max_attempts=3)
def core_outcome(job: awa_django.JobContext[CoreOutcome]) -> Any:
    CALLS.append((job.id, job.attempt))
    mode, seconds = job.args.mode, job.args.seconds
    if mode == "ok":
        job.result = {"answer": 42, "attempt": job.attempt}
        return None
    if mode == "retry_after":
        return RetryAfter(seconds)
    if mode == "snooze":
        return Snooze(seconds)
    if mode == "cancel":
        return Cancel(job.args.note)
    if mode == "raise":
        raise CoreOutcomeBoom("boom")
    if mode == "terminal":
        raise TerminalError("card declined")
    if mode == "progress":
        if job.attempt == 1:
            job.set_progress(50, "halfway")
            job.update_metadata({"cursor": 17})
            raise CoreOutcomeBoom("interrupted")
        assert job.progress == {
            "percent": 50.0,
            "message": "halfway",
            "metadata": {"cursor": 17},
        }
        job.set_progress(100)
        return None
    if mode == "park_unregistered":
        return WaitForCallback(CallbackToken(id=uuid.uuid4(), timeout_at=timezone.now()))
    if mode == "park":
        return WaitForCallback(job.register_callback(timeout=60))
    if mode == "odd":
        return ODD_RESULTS[job.args.note]
    if mode == "db_error":
        Job.objects.filter(id=job.id).update(tags=["touched"])
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")  # fails, and aborts a surrounding transaction
        return None
    if mode == "db_error_caught":
        # The handler swallows its database errors, once plainly and once inside an atomic
        # block without savepoint (which marks the outer transaction for rollback).
        for savepoint in (True, False):
            try:
                with transaction.atomic(savepoint=savepoint), connection.cursor() as cursor:
                    cursor.execute("SELECT 1 / 0")
            except DataError:
                pass
        return None
    if mode == "raise_nul":
        raise CoreOutcomeBoom("binary \x00 in the message")
    if mode == "bad_progress":
        job.update_metadata({"started": timezone.now()})  # a datetime is not JSON
        return RetryAfter(1)
    raise AssertionError(f"unknown mode {mode}")


# Outcomes a handler may return by mistake: each must fail the attempt, never wedge the job.
ODD_RESULTS: dict[str, Any] = {
    "retry_inf": RetryAfter(float("inf")),
    "retry_nan": RetryAfter(float("nan")),
    "retry_text": RetryAfter("soon"),  # type: ignore[arg-type]
    "snooze_inf": Snooze(float("inf")),
    "park_junk": WaitForCallback("not a token"),  # type: ignore[arg-type]
    "retry_timedelta": RetryAfter(dt.timedelta(minutes=2)),  # type: ignore[arg-type]
    "snooze_huge": Snooze(1e20),
}


@dataclass
class CoreOutcomeTyped:
    order_id: int
    email: str

    def __post_init__(self) -> None:
        if self.order_id < 0:
            raise ValueError("order_id must be >= 0")


@awa_django.job(CoreOutcomeTyped, queue=QUEUE)
def core_outcome_typed(job: awa_django.JobContext[CoreOutcomeTyped]) -> None:
    CALLS.append((job.id, job.attempt))


@dataclass
class CoreOutcomeAsync:
    fail: bool


@awa_django.job(CoreOutcomeAsync, queue=QUEUE)
async def core_outcome_async(job: awa_django.JobContext[CoreOutcomeAsync]) -> None:
    CALLS.append((job.id, job.attempt))
    if job.args.fail:
        raise CoreOutcomeBoom("async boom")


@dataclass
class CoreOutcomeAsyncPark:
    pass


@awa_django.job(CoreOutcomeAsyncPark, queue=QUEUE)
async def core_outcome_async_park(job: awa_django.JobContext[CoreOutcomeAsyncPark]) -> Any:
    CALLS.append((job.id, job.attempt))
    token = await job.aregister_callback(timeout=60)
    # The ORM's async API, like the JobContext's async twins, runs on the caller's
    # connection inline: it sees this test's uncommitted rows.
    stored = await Job.objects.aget(id=job.id)
    assert (stored.state, stored.callback_id) == ("running", token.id)
    return WaitForCallback(token)


class JobFactory(BaseJobFactory):
    # The model's db_default is statement_timestamp(), later than this test transaction's
    # now(): a row written through the ORM would not be due yet for the claim.
    run_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=1))


@pytest.fixture(autouse=True)
def _reset_calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


def enqueue(mode: str, **options: Any) -> int:
    seconds = options.pop("seconds", 0.0)
    note = options.pop("note", "")
    return awa_django.enqueue(CoreOutcome(mode, seconds, note), **options).id


def run(job_id: int) -> Job:
    """Run what is available on the test queue; the job afterwards."""
    run_available(QUEUE)
    return Job.objects.get(id=job_id)


def promote(job_id: int) -> None:
    """Make a deferred job due and promote it, as the leader would."""
    Job.objects.filter(id=job_id).update(run_at=F("run_at") - dt.timedelta(days=2))
    maintenance_sql.job_promote_due(limit=100).run("default")


def calls_of(job_id: int) -> list[int]:
    return [attempt for jid, attempt in CALLS if jid == job_id]


# -- completed ----------------------------------------------------------------------------
def test_none_completes_and_stores_the_result() -> None:
    job_id = enqueue("ok")
    job = run(job_id)
    assert (job.state, job.attempt, job.run_lease) == ("completed", 1, 1)
    assert job.result == {"answer": 42, "attempt": 1}
    assert job.finalized_at is not None and job.progress is None and job.errors == []
    assert job.attempted_by == ["inline"]
    assert calls_of(job_id) == [1]


def test_events_of_a_completion(django_capture_on_commit_callbacks: Any) -> None:
    job_id = enqueue("ok")
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        run(job_id)
    assert captured.names() == ["Started", "Completed"]
    started, completed = captured.events
    assert isinstance(started, Started) and started.job.state == "running"
    assert isinstance(completed, Completed) and completed.job.state == "completed"
    assert completed.job.result == {"answer": 42, "attempt": 1}
    assert completed.duration >= dt.timedelta(0)


def test_inline_completion_costs_four_queries(django_assert_num_queries: Any) -> None:
    enqueue("ok")
    # claim, complete, the claim of owed events (decision 046), the claim that finds the
    # queue empty, and (inside this test's transaction only) the savepoints around the
    # handler and around the completion (so a refused write leaves the test's transaction
    # usable), each with its release.
    with django_assert_num_queries(8):
        assert run_available(QUEUE) == 1


@pytest.mark.django_db(transaction=True)
def test_inline_completion_in_autocommit_costs_four_queries(
    django_assert_num_queries: Any,
) -> None:
    enqueue("ok")
    # claim, complete, the claim of owed events (decision 046), the claim that finds nothing
    with django_assert_num_queries(4):
        assert run_available(QUEUE) == 1


# -- RetryAfter ---------------------------------------------------------------------------
def test_retry_after_is_retryable_at_now_plus_seconds_without_error() -> None:
    job = run(enqueue("retry_after", seconds=7.5))
    assert (job.state, job.attempt, job.errors) == ("retryable", 1, [])
    assert job.finalized_at is not None
    assert job.run_at - job.finalized_at == dt.timedelta(seconds=7.5)


def test_retry_after_negative_seconds_means_now() -> None:
    job = run(enqueue("retry_after", seconds=-5))
    assert job.state == "retryable" and job.run_at == job.finalized_at


def test_retry_after_exhausts_at_max_attempts(django_capture_on_commit_callbacks: Any) -> None:
    job_id = enqueue("retry_after", seconds=5, max_attempts=2)
    assert run(job_id).state == "retryable"
    promote(job_id)
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        job = run(job_id)
    assert (job.state, job.attempt) == ("failed", 2)
    assert [e["error"] for e in job.errors] == [
        "max_attempts exhausted (handler requested retry after 5s)"
    ]
    assert job.errors[0]["attempt"] == 2 and "terminal" not in job.errors[0]
    assert captured.names() == ["Started", "Exhausted"]
    assert calls_of(job_id) == [1, 2]


def test_retry_after_event_is_retried_with_an_empty_error(
    django_capture_on_commit_callbacks: Any,
) -> None:
    job_id = enqueue("retry_after", seconds=3)
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        job = run(job_id)
    (retried,) = captured.of_type(Retried)
    assert isinstance(retried, Retried)
    assert (retried.error, retried.attempt, retried.next_run_at) == ("", 1, job.run_at)


# -- Snooze -------------------------------------------------------------------------------
def test_snooze_restores_the_attempt_and_keeps_finalized_at(
    django_capture_on_commit_callbacks: Any,
) -> None:
    earlier = timezone.now() - dt.timedelta(hours=1)
    previous_error = {"error": "old", "attempt": 1, "at": earlier.isoformat()}
    job_id = JobFactory(
        kind="core_outcome",
        queue=QUEUE,
        args={"mode": "snooze", "seconds": 30},
        attempt=1,
        run_lease=1,
        finalized_at=earlier,
        errors=[previous_error],
        progress={"percent": 10.0},
    ).id
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        job = run(job_id)
    assert (job.state, job.attempt, job.run_lease) == ("scheduled", 1, 2)
    assert job.finalized_at == earlier
    assert job.errors == [previous_error]
    assert job.progress == {"percent": 10.0}
    assert job.attempted_at is not None
    assert job.run_at - job.attempted_at == dt.timedelta(seconds=30)
    assert captured.names() == ["Started"]  # no event for a snooze
    assert calls_of(job_id) == [2]


def test_snooze_forever_never_exhausts() -> None:
    job_id = enqueue("snooze", seconds=1, max_attempts=1)
    for _ in range(3):
        job = run(job_id)
        assert (job.state, job.attempt) == ("scheduled", 0)
        promote(job_id)
    assert calls_of(job_id) == [1, 1, 1]


# -- Cancel -------------------------------------------------------------------------------
def test_cancel_is_cancelled_with_the_reason(django_capture_on_commit_callbacks: Any) -> None:
    job_id = enqueue("cancel", note="customer left")
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        job = run(job_id)
    assert job.state == "cancelled" and job.finalized_at is not None
    assert [(e["error"], e["attempt"]) for e in job.errors] == [("cancelled: customer left", 1)]
    (cancelled,) = captured.of_type(Cancelled)
    assert isinstance(cancelled, Cancelled) and cancelled.reason == "customer left"


# -- exceptions ---------------------------------------------------------------------------
def test_exception_is_retryable_with_backoff_and_an_error_entry(
    django_capture_on_commit_callbacks: Any,
) -> None:
    job_id = enqueue("raise")
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        job = run(job_id)
    assert (job.state, job.attempt) == ("retryable", 1)
    assert job.finalized_at is not None
    delay = (job.run_at - job.finalized_at).total_seconds()
    assert 2.0 <= delay < 2.5
    (entry,) = job.errors
    assert set(entry) == {"error", "type", "attempt", "at"}
    assert (entry["attempt"], entry["type"]) == (1, f"{__name__}.CoreOutcomeBoom")
    head, _, trace = entry["error"].partition("\n")
    assert head == f"{__name__}.CoreOutcomeBoom: boom"
    assert "Traceback" in trace and 'raise CoreOutcomeBoom("boom")' in trace
    assert dt.datetime.fromisoformat(entry["at"]) == job.finalized_at
    (retried,) = captured.of_type(Retried)
    assert isinstance(retried, Retried)
    assert (retried.attempt, retried.next_run_at) == (1, job.run_at)
    assert retried.error == entry["error"]


def test_backoff_grows_with_the_attempt() -> None:
    job_id = enqueue("raise")
    run(job_id)
    promote(job_id)
    job = run(job_id)
    assert job.attempt == 2
    assert job.finalized_at is not None
    assert 4.0 <= (job.run_at - job.finalized_at).total_seconds() < 5.0


def test_always_failing_job_runs_exactly_max_attempts_times(
    django_capture_on_commit_callbacks: Any,
) -> None:
    job_id = enqueue("raise")  # max_attempts=3 from the registration
    states = []
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):
            states.append(run(job_id).state)
            promote(job_id)
    assert calls_of(job_id) == [1, 2, 3]
    assert states == ["retryable", "retryable", "failed", "failed", "failed"]
    job = Job.objects.get(id=job_id)
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]
    assert not any(e.get("terminal") for e in job.errors)
    assert captured.names() == [
        *["Started", "Retried"] * 2,
        "Started",
        "Exhausted",
    ]
    exhausted = captured.events[-1]
    assert isinstance(exhausted, Exhausted) and exhausted.attempt == 3


def test_terminal_error_fails_at_once(django_capture_on_commit_callbacks: Any) -> None:
    job_id = enqueue("terminal")
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        job = run(job_id)
    assert (job.state, job.attempt) == ("failed", 1)
    (entry,) = job.errors
    assert entry["terminal"] is True and entry["attempt"] == 1
    assert entry["error"].startswith("awa_django.exceptions.TerminalError: card declined\n")
    assert captured.names() == ["Started", "Exhausted"]


def test_async_handler_outcomes_inline() -> None:
    ok = awa_django.enqueue(CoreOutcomeAsync(fail=False)).id
    bad = awa_django.enqueue(CoreOutcomeAsync(fail=True)).id
    run_available(QUEUE)
    assert Job.objects.get(id=ok).state == "completed"
    failed = Job.objects.get(id=bad)
    assert failed.state == "retryable"
    assert failed.errors[0]["error"].startswith(f"{__name__}.CoreOutcomeBoom: async boom\n")


def test_an_async_handler_parks_inline_inside_the_callers_transaction() -> None:
    job_id = awa_django.enqueue(CoreOutcomeAsyncPark()).id
    job = run(job_id)
    assert (job.state, job.errors) == ("waiting_external", [])
    assert job.callback_id is not None and calls_of(job_id) == [1]


# -- malformed outcomes ------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["retry_inf", "retry_nan", "retry_text", "snooze_inf", "park_junk"]
)
def test_a_malformed_outcome_fails_the_attempt_and_never_wedges_the_job(name: str) -> None:
    job = run(enqueue("odd", note=name))
    assert (job.state, job.attempt) == ("retryable", 1)
    (entry,) = job.errors
    assert entry["error"].split(":")[0] in ("TypeError", "ValueError")
    assert not ActiveLease.objects.filter(job_id=job.id).exists()


def test_retry_after_a_timedelta() -> None:
    job = run(enqueue("odd", note="retry_timedelta"))
    assert job.finalized_at is not None
    assert job.state == "retryable" and job.run_at - job.finalized_at == dt.timedelta(minutes=2)


def test_a_huge_snooze_is_capped_at_ten_years() -> None:
    job = run(enqueue("odd", note="snooze_huge"))
    assert job.state == "scheduled"
    assert job.attempted_at is not None
    assert job.run_at - job.attempted_at == dt.timedelta(days=3650)


def test_an_exception_message_with_nul_is_stored_escaped() -> None:
    job = run(enqueue("raise_nul"))
    assert job.state == "retryable"
    assert job.errors[0]["error"].startswith(f"{__name__}.CoreOutcomeBoom: binary \\x00 in")


def test_progress_that_is_not_json_fails_the_attempt_with_a_clear_error() -> None:
    job = run(enqueue("bad_progress"))
    assert job.state == "retryable"
    assert "SerializationError" in job.errors[0]["error"]


# -- database errors in a handler -----------------------------------------------------------
def test_a_failed_query_in_a_handler_is_a_retry_even_inside_a_transaction(
    django_capture_on_commit_callbacks: Any,
) -> None:
    # This test runs inside a transaction (like a user's TestCase): the handler's failed
    # query aborts it, yet the outcome is written and later jobs still run.
    job_id = enqueue("db_error")
    after = enqueue("ok")
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        assert run_available(QUEUE) == 2
    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt) == ("retryable", 1)
    assert job.errors[0]["error"].startswith("django.db.utils.DataError: division by zero")
    assert Job.objects.get(id=after).state == "completed"
    assert captured.names() == ["Started", "Retried", "Started", "Completed"]


def test_a_handler_that_swallows_its_database_errors_still_completes() -> None:
    job = run(enqueue("db_error_caught"))
    assert (job.state, job.errors) == ("completed", [])


# -- bad input never crashes --------------------------------------------------------------
def test_unknown_kind_fails_with_the_catalogue_message(
    django_capture_on_commit_callbacks: Any,
) -> None:
    job_id = JobFactory(kind="core_outcome_nobody", queue=QUEUE).id
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        job = run(job_id)
    assert (job.state, job.attempt) == ("failed", 1)
    assert [(e["error"], e["terminal"]) for e in job.errors] == [
        ("unknown job kind: core_outcome_nobody", True)
    ]
    assert captured.names() == ["Started", "Exhausted"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"order_id": 1}, "args do not fit CoreOutcomeTyped: "),
        ({"order_id": 1, "email": "e", "coupon": "X"}, "'coupon'"),
        ({"order_id": "1", "email": "e"}, "field 'order_id' expects int, got str"),
        ({"order_id": 1, "email": ["e"]}, "field 'email' expects str, got list"),
        ({"order_id": -1, "email": "e"}, "order_id must be >= 0"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_args_that_do_not_fit_fail_with_a_clear_message(args: Any, message: str) -> None:
    job_id = JobFactory(kind="core_outcome_typed", queue=QUEUE, args=args).id
    job = run(job_id)
    assert (job.state, job.attempt) == ("failed", 1)
    (entry,) = job.errors
    assert entry["terminal"] is True
    assert entry["error"].startswith("args do not fit CoreOutcomeTyped")
    assert message in entry["error"] and "Traceback" not in entry["error"]
    assert calls_of(job_id) == []  # the handler never ran


def test_a_bad_job_does_not_stop_the_others() -> None:
    bad = JobFactory(kind="core_outcome_nobody", queue=QUEUE).id
    good = enqueue("ok")
    assert run_available(QUEUE) == 2
    assert Job.objects.get(id=bad).state == "failed"
    assert Job.objects.get(id=good).state == "completed"


# -- progress -----------------------------------------------------------------------------
def test_progress_is_kept_across_a_retry_and_cleared_on_success() -> None:
    job_id = enqueue("progress")
    job = run(job_id)
    assert job.state == "retryable"
    assert job.progress == {"percent": 50.0, "message": "halfway", "metadata": {"cursor": 17}}
    promote(job_id)
    job = run(job_id)  # the handler asserts it sees the progress of attempt 1
    assert (job.state, job.progress) == ("completed", None)
    assert calls_of(job_id) == [1, 2]


# -- WaitForCallback ----------------------------------------------------------------------
def test_wait_for_callback_without_register_callback_is_a_contract_violation(
    django_capture_on_commit_callbacks: Any,
) -> None:
    job_id = enqueue("park_unregistered")
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        job = run(job_id)
    assert (job.state, job.callback_id) == ("failed", None)
    assert [(e["error"], e["terminal"]) for e in job.errors] == [
        ("WaitForCallback returned without calling register_callback", True)
    ]
    assert captured.names() == ["Started", "Exhausted"]


def test_wait_for_callback_with_a_registered_token_parks() -> None:
    job = run(enqueue("park"))
    assert job.state == "waiting_external" and job.callback_id is not None
    assert job.callback_timeout_at is not None and job.attempted_at is not None
    assert job.callback_timeout_at - job.attempted_at == dt.timedelta(seconds=60)
    assert job.finalized_at is None
