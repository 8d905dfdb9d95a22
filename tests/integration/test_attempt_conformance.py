"""The handler-outcome table of DESIGN §5, tested once against both schedulers of the one
attempt lifecycle (STYLE §16): the inline runner (`run_available()`, what
`testing.drain()` runs) and the worker's `Executor` with its batched `Completer` and its
`HookQueue`, in-process on an event loop with the runtime's own `Database`.

Every test runs one attempt through `run_attempt(scheduler, job_id)` and asserts the
committed row and the events it leaves behind. The expectations are written once, so a
scheduler that drifts from the table fails its half of the parametrisation.

Transactional tests: the worker writes on its own connections, so the rows must be
committed; the inline runner then runs in autocommit and dispatches its events at once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from django.utils import timezone

import awa_django
from awa_django.conf import QueueConfig, awa_settings
from awa_django.events import (
    Cancelled,
    Completed,
    Event,
    Exhausted,
    Retried,
    Started,
    WaitingForCallback,
)
from awa_django.exceptions import TerminalError
from awa_django.execution import attempt
from awa_django.execution.context import JobContext
from awa_django.execution.inline import WORKER_ID as INLINE_WORKER_ID
from awa_django.execution.inline import run_available
from awa_django.results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job
from awa_django.testing import capture_events
from awa_django.worker.completer import Completer
from awa_django.worker.database import Database
from awa_django.worker.executor import Executor
from awa_django.worker.hook_queue import HookQueue
from awa_django.worker.inflight import InFlight
from tests.factories import JobFactory
from tests.runtime_db import first_claim

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "conformance"
WORKER_ID = "conformance-worker"
ATTEMPT_TIMEOUT = 20.0
# The gap between two statements of one attempt (claim, then the outcome) on a test
# machine: generous, since it only bounds intervals that are not computed in one statement.
SLACK = dt.timedelta(seconds=5)

calls: list[int] = []  # the job id of every handler call (module state, reset per test)
SEEN: dict[int, dict[str, Any]] = {}  # what a handler observed mid-attempt, by job id


class ConformanceBoom(Exception):
    pass


BOOM = f"{__name__}.ConformanceBoom"


@dataclass
class Conformance:
    mode: str
    seconds: float = 0.0
    note: str = ""


Handler = Callable[[JobContext[Conformance]], Any]


def _stored(job_id: int, *fields: str) -> dict[str, Any]:
    """The committed row's `fields`, read on Django's connection of the handler's thread."""
    return Job.objects.filter(id=job_id).values(*fields).get()


def _complete(job: JobContext[Conformance]) -> None:
    return None


def _complete_with_result(job: JobContext[Conformance]) -> None:
    job.result = {"answer": 42, "attempt": job.attempt}


def _complete_with_progress(job: JobContext[Conformance]) -> None:
    job.set_progress(100, "done")


def _unstorable_result(job: JobContext[Conformance]) -> None:
    job.result = object() if job.args.note == "object" else "x" * (awa_settings().max_result_bytes)


def _retry_after(job: JobContext[Conformance]) -> RetryAfter:
    return RetryAfter(job.args.seconds)


def _snooze(job: JobContext[Conformance]) -> Snooze:
    return Snooze(job.args.seconds)


def _cancel(job: JobContext[Conformance]) -> Cancel:
    return Cancel(job.args.note)


def _park(job: JobContext[Conformance]) -> WaitForCallback:
    token = job.register_callback(timeout=60)
    SEEN[job.id] = {"token": token, **_stored(job.id, "callback_id", "state")}
    return WaitForCallback(token)


def _park_unregistered(job: JobContext[Conformance]) -> WaitForCallback:
    return WaitForCallback(CallbackToken(id=uuid.uuid4(), timeout_at=timezone.now()))


def _raise(job: JobContext[Conformance]) -> None:
    raise ConformanceBoom("boom")


def _raise_terminal(job: JobContext[Conformance]) -> None:
    raise TerminalError("card declined")


def _exit(job: JobContext[Conformance]) -> None:
    sys.exit(3)


def _progress_then_raise(job: JobContext[Conformance]) -> None:
    job.set_progress(50, "halfway")
    job.update_metadata({"cursor": 17})
    job.flush_progress()
    SEEN[job.id] = _stored(job.id, "progress")
    raise ConformanceBoom("interrupted")


def _cancelled_meanwhile(job: JobContext[Conformance]) -> RetryAfter | None:
    """An operator cancels the job while its handler runs; the handler then finishes."""
    awa_django.Client().cancel(job.id)
    SEEN[job.id] = _stored(job.id, *ROW_FIELDS)
    return None if job.args.note == "complete" else RetryAfter(1)


MODES: dict[str, Handler] = {
    "complete": _complete,
    "complete_with_result": _complete_with_result,
    "complete_with_progress": _complete_with_progress,
    "unstorable_result": _unstorable_result,
    "retry_after": _retry_after,
    "snooze": _snooze,
    "cancel": _cancel,
    "park": _park,
    "park_unregistered": _park_unregistered,
    "raise": _raise,
    "raise_terminal": _raise_terminal,
    "exit": _exit,
    "progress_then_raise": _progress_then_raise,
    "cancelled_meanwhile": _cancelled_meanwhile,
}


@awa_django.job(Conformance, queue=QUEUE, max_attempts=3)
def conformance(job: JobContext[Conformance]) -> Any:
    calls.append(job.id)
    return MODES[job.args.mode](job)


@dataclass
class ConformanceAsync:
    mode: str


BLOCKING_CALLS: dict[str, Callable[[JobContext[ConformanceAsync]], Any]] = {
    "register_callback": lambda job: job.register_callback(timeout=60),
    "flush_progress": lambda job: job.flush_progress(),
    "wait_for_callback": lambda job: job.wait_for_callback(
        CallbackToken(id=uuid.uuid4(), timeout_at=timezone.now())
    ),
}


@awa_django.job(ConformanceAsync, queue=QUEUE, max_attempts=3)
async def conformance_async(job: JobContext[ConformanceAsync]) -> Any:
    calls.append(job.id)
    if job.args.mode == "raise":
        raise ConformanceBoom("async boom")
    if job.args.mode == "park":
        return WaitForCallback(await job.aregister_callback(timeout=60))
    if job.args.mode in BLOCKING_CALLS:
        BLOCKING_CALLS[job.args.mode](job)  # a mistake: the sync twin, inside the loop
    job.result = {"async": True}
    return None


@pytest.fixture(autouse=True)
def _reset_observations() -> Iterator[None]:
    calls.clear()
    SEEN.clear()
    yield
    calls.clear()
    SEEN.clear()


@pytest.fixture(params=["inline", "worker"])
def scheduler(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# -- running one attempt on either scheduler ---------------------------------------------
ROW_FIELDS = (
    "state",
    "attempt",
    "run_lease",
    "run_at",
    "attempted_at",
    "finalized_at",
    "errors",
    "progress",
    "callback_id",
    "callback_timeout_at",
    "result",
)


def run_attempt(scheduler: str, job_id: int) -> tuple[Job, list[Event]]:
    """Claim and run the one available job `job_id` on `scheduler`; the committed row and
    the events its hooks received, in delivery order."""
    with capture_events() as captured:
        if scheduler == "inline":
            assert run_available(QUEUE) == 1
        else:
            asyncio.run(asyncio.wait_for(_run_in_worker(), ATTEMPT_TIMEOUT))
    job = Job.objects.get(id=job_id)
    assert job.attempted_by == [INLINE_WORKER_ID if scheduler == "inline" else WORKER_ID]
    # Every outcome, stale ones included, leaves no lease: the writer deletes it in the
    # statement that moves the job (or the cancel did).
    assert not ActiveLease.objects.filter(job_id=job_id).exists()
    return job, list(captured.events)


async def _run_in_worker() -> None:
    """One attempt as the worker runs it: claim on the runtime's pool, the `Executor` with
    the batched `Completer` flushing, then deliver what reached the `HookQueue`."""
    db = Database("default", "awa-conformance", max_size=4)
    await db.open()
    threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="awa-conformance")
    completer = Completer(db, forced=lambda: False)
    hook_queue = HookQueue()
    flushing = asyncio.ensure_future(completer.run())
    executor = Executor(
        db,
        completer,
        InFlight(),
        threads,
        hook_queue,
        awa_settings().max_result_bytes,
        forced=lambda: False,
    )
    try:
        (row,) = await db.run(attempt.claim(QueueConfig(QUEUE), 10, WORKER_ID))
        released: list[int] = []
        await executor.execute(row, lambda: released.append(row.id))
        assert released == [row.id]  # the slot is given back on every outcome
        while hook_queue.pending:  # every event is queued once execute() returned
            await hook_queue.run_once()
    finally:
        flushing.cancel()
        threads.shutdown(wait=True)
        hook_queue.close()
        await db.close()


def enqueue(mode: str, *, seconds: float = 0.0, note: str = "", max_attempts: int = 3) -> int:
    return awa_django.enqueue(Conformance(mode, seconds, note), max_attempts=max_attempts).id


def names(events: list[Event]) -> list[str]:
    return [type(event).__name__ for event in events]


def outcome_event(events: list[Event], kind: type[Event]) -> Any:
    """The one outcome event after `Started`; asserts that is all there was."""
    assert names(events) == ["Started", kind.__name__]
    started, outcome = events
    assert isinstance(started, Started) and started.job.state == "running"
    assert isinstance(outcome, kind)
    return outcome


def only_entry(job: Job, keys: set[str]) -> dict[str, Any]:
    """The job's single error entry, which has exactly `keys` and this attempt's `at`."""
    (entry,) = job.errors
    assert set(entry) == keys
    assert entry["attempt"] == job.attempt
    assert dt.datetime.fromisoformat(entry["at"]) == job.finalized_at
    return entry


def traceback_entry(job: Job, kind: str, message: str, raised_by: str) -> dict[str, Any]:
    """An error entry of a raised exception: type, `Type: message` and the trace's last
    lines, down to the `raised_by` line. (The frames above it are the scheduler's own.)"""
    entry = only_entry(job, {"error", "type", "attempt", "at"})
    assert entry["type"] == kind
    head, _, trace = entry["error"].partition("\n")
    assert head == f"{kind}: {message}"
    assert trace.endswith(f"    {raised_by}\n{kind}: {message}\n")  # format_exception's end
    return entry


# -- returns None: completed --------------------------------------------------------------
def test_none_completes_without_a_result(scheduler: str) -> None:
    job_id = enqueue("complete")
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt, first_claim(job.run_lease)) == ("completed", 1, True)
    assert job.attempted_at is not None
    assert job.finalized_at is not None and job.finalized_at >= job.attempted_at
    assert (job.result, job.errors, job.progress, job.callback_id) == (None, [], None, None)
    completed = outcome_event(events, Completed)
    assert completed.job.state == "completed" and completed.job.result is None
    assert dt.timedelta(0) <= completed.duration < SLACK
    assert calls == [job_id]


def test_none_completes_and_stores_the_result(scheduler: str) -> None:
    job_id = enqueue("complete_with_result")
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.result) == ("completed", {"answer": 42, "attempt": 1})
    assert outcome_event(events, Completed).job.result == {"answer": 42, "attempt": 1}


def test_completion_clears_the_progress(scheduler: str) -> None:
    job, _ = run_attempt(scheduler, enqueue("complete_with_progress"))
    assert (job.state, job.progress) == ("completed", None)


@pytest.mark.parametrize(
    ("note", "message"),
    [
        ("object", "cannot be serialised to JSON"),
        ("too_large", f"the limit is {awa_settings().max_result_bytes}"),
    ],
)
def test_a_result_that_cannot_be_stored_fails_the_job_for_good(
    scheduler: str, note: str, message: str
) -> None:
    job_id = enqueue("unstorable_result", note=note)
    job, events = run_attempt(scheduler, job_id)
    # The same value would be refused on every retry: failed at once, the result unwritten.
    assert (job.state, job.attempt, job.result) == ("failed", 1, None)
    assert job.finalized_at is not None
    entry = only_entry(job, {"error", "type", "attempt", "at", "terminal"})
    kind = "SerializationError" if note == "object" else "PayloadTooLarge"
    assert (entry["type"], entry["terminal"]) == (f"awa_django.exceptions.{kind}", True)
    assert entry["error"].startswith("the outcome of this attempt could not be stored: ")
    assert f"result of job {job_id}" in entry["error"] and message in entry["error"]
    exhausted = outcome_event(events, Exhausted)
    assert (exhausted.error, exhausted.attempt) == (entry["error"], 1)


# -- RetryAfter ---------------------------------------------------------------------------
def test_retry_after_is_retryable_at_now_plus_seconds(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("retry_after", seconds=7.5))
    assert (job.state, job.attempt, job.errors, job.result) == ("retryable", 1, [], None)
    assert job.finalized_at is not None
    assert job.run_at - job.finalized_at == dt.timedelta(seconds=7.5)  # one statement's now()
    retried = outcome_event(events, Retried)
    assert (retried.error, retried.attempt, retried.next_run_at) == ("", 1, job.run_at)
    assert retried.job.state == "retryable"


def test_retry_after_on_the_last_attempt_exhausts(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("retry_after", seconds=5, max_attempts=1))
    assert (job.state, job.attempt) == ("failed", 1)
    assert job.finalized_at is not None
    entry = only_entry(job, {"error", "attempt", "at"})  # neither a type nor terminal
    assert entry["error"] == "max_attempts exhausted (handler requested retry after 5s)"
    exhausted = outcome_event(events, Exhausted)
    assert (exhausted.error, exhausted.attempt) == (entry["error"], 1)


# -- Snooze -------------------------------------------------------------------------------
def test_snooze_is_scheduled_with_the_attempt_restored_and_no_event(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("snooze", seconds=30))
    assert (job.state, job.attempt, first_claim(job.run_lease)) == ("scheduled", 0, True)
    assert (job.finalized_at, job.errors) == (None, [])
    assert job.attempted_at is not None
    waited = job.run_at - job.attempted_at  # claim and snooze are two statements
    assert dt.timedelta(seconds=30) <= waited < dt.timedelta(seconds=30) + SLACK
    assert names(events) == ["Started"]


# -- Cancel -------------------------------------------------------------------------------
def test_cancel_is_cancelled_with_the_reason(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("cancel", note="customer left"))
    assert (job.state, job.attempt) == ("cancelled", 1)
    assert job.finalized_at is not None
    entry = only_entry(job, {"error", "attempt", "at"})
    assert entry["error"] == "cancelled: customer left"
    cancelled = outcome_event(events, Cancelled)
    assert (cancelled.reason, cancelled.job.state) == ("customer left", "cancelled")


# -- WaitForCallback ----------------------------------------------------------------------
def test_wait_for_callback_parks_the_job(scheduler: str) -> None:
    job_id = enqueue("park")
    job, events = run_attempt(scheduler, job_id)
    token: CallbackToken = SEEN[job_id]["token"]
    # register_callback wrote the callback while the handler ran (from its own thread).
    assert (SEEN[job_id]["state"], SEEN[job_id]["callback_id"]) == ("running", token.id)
    assert (job.state, job.attempt, job.callback_id) == ("waiting_external", 1, token.id)
    assert job.callback_timeout_at == token.timeout_at
    assert job.callback_timeout_at is not None and job.attempted_at is not None
    timeout = job.callback_timeout_at - job.attempted_at
    assert dt.timedelta(seconds=60) <= timeout < dt.timedelta(seconds=60) + SLACK
    assert (job.finalized_at, job.errors) == (None, [])
    waiting = outcome_event(events, WaitingForCallback)
    assert (waiting.job.state, waiting.job.callback_id) == ("waiting_external", token.id)


def test_wait_for_callback_without_register_callback_is_a_contract_violation(
    scheduler: str,
) -> None:
    job, events = run_attempt(scheduler, enqueue("park_unregistered"))
    assert (job.state, job.attempt, job.callback_id) == ("failed", 1, None)
    entry = only_entry(job, {"error", "attempt", "at", "terminal"})
    assert entry["error"] == "WaitForCallback returned without calling register_callback"
    assert entry["terminal"] is True
    assert outcome_event(events, Exhausted).error == entry["error"]


# -- raises -------------------------------------------------------------------------------
def test_an_exception_is_retryable_with_backoff_and_an_error_entry(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("raise"))
    assert (job.state, job.attempt, job.finalized_at is not None) == ("retryable", 1, True)
    assert job.finalized_at is not None
    assert 2.0 <= (job.run_at - job.finalized_at).total_seconds() < 2.5  # 2^a·[1, 1.25)
    entry = traceback_entry(job, BOOM, "boom", 'raise ConformanceBoom("boom")')
    retried = outcome_event(events, Retried)
    assert (retried.error, retried.attempt, retried.next_run_at) == (entry["error"], 1, job.run_at)


def test_an_exception_on_the_last_attempt_exhausts(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("raise", max_attempts=1))
    assert (job.state, job.attempt) == ("failed", 1)
    entry = traceback_entry(job, BOOM, "boom", 'raise ConformanceBoom("boom")')  # not terminal
    exhausted = outcome_event(events, Exhausted)
    assert (exhausted.error, exhausted.attempt) == (entry["error"], 1)


def test_terminal_error_fails_at_once(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("raise_terminal"))
    assert (job.state, job.attempt) == ("failed", 1)
    entry = only_entry(job, {"error", "type", "attempt", "at", "terminal"})
    assert (entry["type"], entry["terminal"]) == ("awa_django.exceptions.TerminalError", True)
    assert entry["error"].startswith("awa_django.exceptions.TerminalError: card declined\n")
    assert outcome_event(events, Exhausted).error == entry["error"]


def test_system_exit_from_a_handler_fails_the_job_for_good(scheduler: str) -> None:
    # Retrying it would end the next worker too (outcomes.plan_failure).
    job, events = run_attempt(scheduler, enqueue("exit"))
    assert (job.state, job.attempt) == ("failed", 1)
    entry = only_entry(job, {"error", "type", "attempt", "at", "terminal"})
    assert (entry["type"], entry["terminal"]) == ("builtins.SystemExit", True)
    assert entry["error"].startswith("SystemExit: 3\n")
    assert outcome_event(events, Exhausted).error == entry["error"]


# -- jobs that cannot run -----------------------------------------------------------------
def test_unknown_kind_fails_with_a_clear_error(scheduler: str) -> None:
    job_id = JobFactory(kind="conformance_nobody", queue=QUEUE).id
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt) == ("failed", 1)
    entry = only_entry(job, {"error", "type", "attempt", "at", "terminal"})
    assert (entry["error"], entry["terminal"]) == ("unknown job kind: conformance_nobody", True)
    assert entry["type"] == "awa_django.exceptions.UnknownJobKind"
    assert outcome_event(events, Exhausted).error == entry["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"seconds": 1}, "missing 1 required positional argument: 'mode'"),
        ({"mode": "complete", "coupon": "X"}, "'coupon'"),
        ({"mode": 7}, "field 'mode' expects str, got int"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_args_that_do_not_fit_fail_with_a_clear_error(
    scheduler: str, args: Any, message: str
) -> None:
    job_id = JobFactory(kind="conformance", queue=QUEUE, args=args).id
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt) == ("failed", 1)
    entry = only_entry(job, {"error", "type", "attempt", "at", "terminal"})
    assert entry["type"] == "awa_django.exceptions.InvalidJobArgs" and entry["terminal"] is True
    assert entry["error"].startswith("args do not fit Conformance: ")
    assert message in entry["error"] and "Traceback" not in entry["error"]
    assert outcome_event(events, Exhausted).error == entry["error"]
    assert calls == []  # the handler never ran


# -- progress -----------------------------------------------------------------------------
def test_flushed_progress_is_written_mid_attempt_and_kept_on_retry(scheduler: str) -> None:
    job_id = enqueue("progress_then_raise")
    job, _ = run_attempt(scheduler, job_id)
    progress = {"percent": 50.0, "message": "halfway", "metadata": {"cursor": 17}}
    assert SEEN[job_id] == {"progress": progress}  # flush_progress() wrote it at once
    assert (job.state, job.progress) == ("retryable", progress)


# -- stale outcomes -----------------------------------------------------------------------
@pytest.mark.parametrize("note", ["complete", "retry"])
def test_an_outcome_after_the_job_was_cancelled_is_stale(scheduler: str, note: str) -> None:
    # `complete` goes through the batched completion, `retry` through the guarded
    # transition: the job keeps the row the cancel committed, and no outcome event fires.
    job_id = enqueue("cancelled_meanwhile", note=note)
    job, events = run_attempt(scheduler, job_id)
    after_cancel = SEEN[job_id]
    assert after_cancel["state"] == "cancelled"
    assert {field: getattr(job, field) for field in ROW_FIELDS} == after_cancel
    # The Client's Cancelled and the claim's Started: no Completed, Retried or Cancelled
    # from the attempt. (Their relative order differs: the worker queues its events.)
    assert sorted(names(events)) == ["Cancelled", "Started"]
    (cancelled,) = [event for event in events if isinstance(event, Cancelled)]
    assert cancelled.reason == "cancelled by operator"


# -- async handlers -----------------------------------------------------------------------
def test_an_async_handler_completes(scheduler: str) -> None:
    job_id = awa_django.enqueue(ConformanceAsync("complete")).id
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.result) == ("completed", {"async": True})
    outcome_event(events, Completed)


def test_an_async_handler_that_raises_is_retried(scheduler: str) -> None:
    job_id = awa_django.enqueue(ConformanceAsync("raise")).id
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt) == ("retryable", 1)
    traceback_entry(job, BOOM, "async boom", 'raise ConformanceBoom("async boom")')
    outcome_event(events, Retried)


def test_an_async_handler_parks_with_aregister_callback(scheduler: str) -> None:
    job_id = awa_django.enqueue(ConformanceAsync("park")).id
    job, events = run_attempt(scheduler, job_id)
    assert job.errors == []
    assert (job.state, job.finalized_at) == ("waiting_external", None)
    assert job.callback_id is not None
    assert outcome_event(events, WaitingForCallback).job.callback_id == job.callback_id


@pytest.mark.parametrize("method", sorted(BLOCKING_CALLS))
def test_an_async_handler_calling_a_blocking_method_gets_a_clear_error(
    scheduler: str, method: str
) -> None:
    job_id = awa_django.enqueue(ConformanceAsync(method)).id
    job, events = run_attempt(scheduler, job_id)
    assert (job.state, job.attempt, job.callback_id) == ("retryable", 1, None)
    entry = only_entry(job, {"error", "type", "attempt", "at"})
    assert entry["type"] == "builtins.RuntimeError"
    assert entry["error"].startswith(
        "RuntimeError: called a blocking JobContext method from an async handler; use its "
        "async twin"
    )
    outcome_event(events, Retried)


def test_the_claim_snapshot_is_what_started_carries(scheduler: str) -> None:
    job_id = enqueue("complete")
    _, events = run_attempt(scheduler, job_id)
    started = events[0]
    assert isinstance(started, Started) and isinstance(started.job, JobSnapshot)
    assert (started.job.id, started.job.attempt) == (job_id, 1)
    assert first_claim(started.job.run_lease)
    assert started.job.attempted_by == [INLINE_WORKER_ID if scheduler == "inline" else WORKER_ID]
