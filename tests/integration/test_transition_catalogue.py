"""The transition catalogue (storage/sql/transitions.py, decision 041): every catalogued
transition through every selector that applies leaves the same row, the same lease rows,
the same NOTIFYs and the same events; every move of a handler's outcome leaves the same
row and events on both schedulers (the inline runner, the worker's Executor); and the
rows rebuilt in Python instead of read back (`completer._completed`, `jobs._written`)
equal the rows the database holds, field by field.

Transactional tests: the worker's statements and the listeners run on connections of
their own, so every row is committed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from django.db import connection

import awa_django
from awa_django.bulk import ACTION_STATES, BulkAction, JobFilter
from awa_django.channels import CANCEL_CHANNEL, channel_for
from awa_django.events import Event
from awa_django.execution.context import JobContext
from awa_django.execution.inline import run_available
from awa_django.snapshot import COLUMNS, JobSnapshot
from awa_django.states import JobState
from awa_django.storage.models import ActiveLease, DeadLetter, Job
from awa_django.storage.sql import callbacks as callbacks_sql
from awa_django.storage.sql import dead_letters as dead_letters_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql import transitions
from awa_django.testing import capture_events
from awa_django.worker import completer as completer_module
from awa_django.worker.completer import Completer
from awa_django.worker.database import Database
from awa_django.worker.executor import Executor
from awa_django.worker.maintenance.rescuer import Rescuer
from tests.factories import JobFactory
from tests.integration import test_attempt_conformance as attempts
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "catalogue"
# Normalised: ids and the database clock's times (only whether they are set is compared).
# callback_id too: each job needs its own (a unique index).
SET_OR_NOT = (
    "created_at",
    "run_at",
    "attempted_at",
    "finalized_at",
    "callback_timeout_at",
    "callback_id",
)
# A kind no hook of the test project listens to: its completions take the lean batch.
UNHOOKED = "catalogue_unhooked"
CALLBACK = ("callback_id", "callback_timeout_at", "callback_result")


def _row(job_id: int) -> dict[str, Any]:
    stored: dict[str, Any] = dict(Job.objects.filter(id=job_id).values().get())
    del stored["id"]
    return stored | {name: stored[name] is not None for name in SET_OR_NOT}


def _job(state: str, **fields: Any) -> Job:
    """A job in `state` as its attempt left it, with a lease when one runs or is parked."""
    defaults: dict[str, Any] = {
        "queue": QUEUE,
        "kind": UNHOOKED,
        "args": {"order_id": 1},
        "attempt": 2,
        "run_lease": 7,
        "errors": [{"error": "earlier", "attempt": 1, "at": "2026-01-01T00:00:00+00:00"}],
        "progress": {"percent": 50},
        "metadata": {"cursor": 3},
    }
    if state == "waiting_external":
        defaults |= {
            "callback_id": uuid.uuid4(),
            "callback_timeout_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
            "callback_result": {"early": True},
        }
    job: Job = JobFactory(state=state, **(defaults | fields))
    if state in ("running", "waiting_external"):
        ActiveLease.objects.create(
            job_id=job.pk, run_lease=job.run_lease, queue=QUEUE, worker_id="w"
        )
    return job


def _token(job: Job) -> uuid.UUID:
    assert job.callback_id is not None
    return job.callback_id


MARKER_CHANNEL = "awa_test_catalogue_marker"


@contextmanager
def _listening(*channels: str) -> Iterator[list[tuple[str, str]]]:
    """The (channel, payload) NOTIFYs on `channels` committed inside the block.

    Complete without waiting out a window: after the block a marker is committed on a
    channel of its own, and PostgreSQL delivers notifications in commit order, so once the
    marker is heard every NOTIFY the block committed has been heard before it (and one
    that came after the marker was not the block's)."""
    heard: list[tuple[str, str]] = []
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as listener:
        for channel in (*channels, MARKER_CHANNEL):
            listener.execute(f'LISTEN "{channel}"')
        yield heard
        with psycopg.connect(**params, autocommit=True) as marker:
            marker.execute("SELECT pg_notify(%s, 'marker')", [MARKER_CHANNEL])
        for notify in listener.notifies(timeout=30):
            if notify.channel == MARKER_CHANNEL:
                return
            heard.append((notify.channel, notify.payload))
        raise AssertionError("the marker NOTIFY was not heard within 30 s")


def _names(events: list[Event]) -> list[str]:
    return [type(event).__name__ for event in events]


def _announced(move: transitions.Move) -> list[str]:
    """The event names a committed `move` fires: its catalogued event, if any."""
    return [] if move.event is None else [move.event.__name__]


def _apply(action: Callable[[], object]) -> tuple[list[str], list[tuple[str, str]]]:
    """Run `action`; the events it fired and the NOTIFYs it sent."""
    with capture_events() as captured, _listening(channel_for(QUEUE), CANCEL_CHANNEL) as heard:
        action()
    return _names(list(captured.events)), heard


# -- the catalogue's own data --------------------------------------------------------------
def test_the_operator_retry_is_the_callback_retry_with_the_priority_restored() -> None:
    retry, operator = transitions.RETRY, transitions.OPERATOR_RETRY
    assert operator.sets == (
        retry.sets + transitions.PRIORITY_RESTORED + (transitions.WAITS_FOR_PARENTS,)
    )
    assert (operator.state, operator.releases, operator.notify) == (
        retry.state,
        retry.releases,
        retry.notify,
    )
    # retry_many and bulk_retry take the same states: the bulk action's.
    assert [str(s) for s in operator.sources] == list(ACTION_STATES[BulkAction.RETRY])


def test_cancel_takes_every_state_the_bulk_cancel_takes() -> None:
    terminal = {"completed", "failed", "cancelled"}
    assert transitions.CANCEL.sources == ()  # any state that is not terminal
    assert not terminal & set(ACTION_STATES[BulkAction.CANCEL])
    guard = transitions.CANCEL.guard("j")
    assert guard == "j.state NOT IN ('completed', 'failed', 'cancelled')"


def test_every_move_of_an_attempt_starts_from_running_and_ends_its_lease() -> None:
    """job_set_state_if_running guards by a running attempt and releases its lease: each
    move it renders must start from `running` and end the lease; a move it does not
    render is refused before any SQL."""
    for move in transitions.ATTEMPT_MOVES:
        assert not move.sources or JobState.RUNNING in move.sources, move.name
        assert move.releases, move.name
    with pytest.raises(ValueError, match="not the outcome of an attempt"):
        jobs_sql.job_set_state_if_running(id=1, run_lease=1, move=transitions.PROMOTE)


def test_an_input_the_move_does_not_take_is_refused() -> None:
    with pytest.raises(ValueError, match="takes no input"):
        transitions.RETRY.assignments(result="NULL")


# -- retry: by ids (retry_many), by bulk window (bulk_retry), by callback id ---------------
RETRY_SELECTORS: dict[str, Callable[[Job], object]] = {
    "ids": lambda job: awa_django.Client().retry_many([job.pk]),
    "bulk_window": lambda job: awa_django.Client().bulk_retry(JobFilter(queue=QUEUE)),
    "callback_id": lambda job: awa_django.Client().retry_external(_token(job)),
}
# The move each selector's verb applies: an operator's retry announces nothing (018).
RETRY_MOVES = {
    "ids": transitions.OPERATOR_RETRY,
    "bulk_window": transitions.OPERATOR_RETRY,
    "callback_id": transitions.RETRY,
}


def _retried(selector: str) -> tuple[dict[str, Any], list[str], list[tuple[str, str]]]:
    job = _job("waiting_external", priority=2)
    events, heard = _apply(lambda: RETRY_SELECTORS[selector](job))
    assert not ActiveLease.objects.filter(job_id=job.pk).exists()
    return _row(job.pk), events, heard


def test_retry_leaves_the_same_row_through_every_selector() -> None:
    results = {selector: _retried(selector) for selector in RETRY_SELECTORS}
    rows = {selector: row for selector, (row, _, _) in results.items()}
    assert rows["ids"] == rows["bulk_window"] == rows["callback_id"]
    row = rows["ids"]
    assert (row["state"], row["attempt"], row["run_lease"]) == ("available", 0, 7)
    assert (row["finalized_at"], row["callback_id"], row["callback_result"]) == (False, False, None)
    assert row["errors"][0]["error"] == "earlier" and row["progress"] == {"percent": 50}
    for selector, (_, events, heard) in results.items():
        assert events == _announced(RETRY_MOVES[selector]), selector
        assert heard and {channel for channel, _ in heard} == {channel_for(QUEUE)}, selector


def test_an_operator_retry_restores_the_enqueued_priority_a_callback_retry_keeps_it() -> None:
    aged = {"priority": 1, "original_priority": 3}
    by_operator = _job("waiting_external", **aged)
    by_callback = _job("waiting_external", **aged)
    awa_django.Client().retry_many([by_operator.pk])
    awa_django.Client().retry_external(_token(by_callback))
    assert (_row(by_operator.pk)["priority"], _row(by_operator.pk)["original_priority"]) == (
        3,
        None,
    )
    assert (_row(by_callback.pk)["priority"], _row(by_callback.pk)["original_priority"]) == (1, 3)


# -- cancel: by ids (cancel_many), by bulk window (bulk_cancel), from every state ---------
CANCEL_SELECTORS: dict[str, Callable[[Job], object]] = {
    "ids": lambda job: awa_django.Client().cancel_many([job.pk]),
    "bulk_window": lambda job: awa_django.Client().bulk_cancel(JobFilter(queue=QUEUE)),
}


@pytest.mark.parametrize("state", ACTION_STATES[BulkAction.CANCEL])
def test_cancel_leaves_the_same_row_through_every_selector(state: str) -> None:
    seen = {}
    for selector, cancel in CANCEL_SELECTORS.items():
        job = _job(state)
        events, heard = _apply(functools.partial(cancel, job))
        assert not ActiveLease.objects.filter(job_id=job.pk).exists()
        hinted = [payload for channel, payload in heard if channel == CANCEL_CHANNEL]
        seen[selector] = (_row(job.pk), events, len(hinted))
    assert seen["ids"] == seen["bulk_window"]
    row, events, hints = seen["ids"]
    assert (row["state"], row["finalized_at"], row["callback_id"]) == ("cancelled", True, False)
    assert events == _announced(transitions.CANCEL) == ["Cancelled"]
    assert hints == (1 if state in ("running", "waiting_external") else 0)


# -- complete: one attempt, a batch (whole rows or lean), a callback id --------------------
def _complete_one(job: Job) -> object:
    return jobs_sql.job_complete_one(id=job.pk, run_lease=job.run_lease, result=None).run("default")


def _complete_batch(job: Job) -> object:
    query = jobs_sql.job_complete_many(ids=[job.pk], leases=[job.run_lease], results=[None])
    return query.run("default")


def _complete_lean(job: Job) -> object:
    query = jobs_sql.job_complete_many_lean(ids=[job.pk], leases=[job.run_lease], results=[None])
    return query.run("default")


COMPLETE_SELECTORS: dict[str, Callable[[Job], object]] = {
    "attempt": _complete_one,
    "batch": _complete_batch,
    "batch_lean": _complete_lean,
    "callback_id": lambda job: awa_django.Client().complete_external(_token(job)),
}


def test_complete_leaves_the_same_row_through_every_selector() -> None:
    rows = {}
    for selector, complete in COMPLETE_SELECTORS.items():
        job = _job("running", callback_id=uuid.uuid4())
        complete(job)
        assert not ActiveLease.objects.filter(job_id=job.pk).exists(), selector
        rows[selector] = _row(job.pk)
    assert rows["attempt"] == rows["batch"] == rows["batch_lean"]
    # Resolving a callback consumes it; the attempt's own completion leaves it.
    assert rows["attempt"]["callback_id"] is True
    assert rows["callback_id"] == rows["attempt"] | {"callback_id": False}
    row = rows["attempt"]
    assert (row["state"], row["finalized_at"], row["progress"], row["result"]) == (
        "completed",
        True,
        None,
        None,
    )


def test_a_stale_completion_moves_nothing_through_any_selector() -> None:
    for selector, complete in COMPLETE_SELECTORS.items():
        if selector == "callback_id":
            continue  # a callback has no run_lease of its own to be stale with
        job = _job("running")
        Job.objects.filter(id=job.pk).update(run_lease=8)  # re-claimed meanwhile
        complete(job)
        assert Job.objects.get(id=job.pk).state == "running", selector


# -- the rows rebuilt in Python equal the rows the database holds --------------------------
def _database_row(job_id: int) -> JobSnapshot:
    row = jobs_sql.job_get(id=job_id).run("default")
    assert row is not None
    return row


def _differences(rebuilt: JobSnapshot, stored: JobSnapshot) -> dict[str, tuple[Any, Any]]:
    return {
        name: (getattr(rebuilt, name), getattr(stored, name))
        for name in COLUMNS
        if getattr(rebuilt, name) != getattr(stored, name)
    }


@pytest.mark.parametrize(
    "result", [None, '{"answer": 42, "n": 1e16, "text": "caf\\u00e9"}', '"ok"', "[1, 2.5]"]
)
def test_the_lean_completion_rebuilds_the_committed_row(result: str | None) -> None:
    """completer._completed (the lean batch: no hook reads the row) equals the row read
    back, for every result shape; the full batch returns the row itself."""
    job = _job("running", progress={"percent": 99})
    claimed = _database_row(job.pk)
    lean = _complete_lean_rows(claimed, result)
    stored = _database_row(job.pk)
    assert _differences(lean, stored) == {}


def _complete_lean_rows(claimed: JobSnapshot, result: str | None) -> JobSnapshot:
    async def run() -> JobSnapshot | None:
        db = Database("default", "awa-catalogue", max_size=2)
        await db.open()
        completer = Completer(db, forced=lambda: False)
        flushing = asyncio.ensure_future(completer.run())
        try:
            return await asyncio.wait_for(completer.complete(claimed, result), 20.0)
        finally:
            flushing.cancel()
            await db.close()

    rebuilt = asyncio.run(run())
    assert rebuilt is not None
    return rebuilt


def test_the_lean_path_is_the_one_rebuilding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a hook on Completed the completer takes the lean statement and rebuilds the
    row with _completed: the comparison above is of the rebuilt row, not a returned one."""
    rebuilt: list[int] = []
    original = completer_module._completed

    def counting(row: JobSnapshot, result: str | None, finalized_at: dt.datetime) -> JobSnapshot:
        rebuilt.append(row.id)
        return original(row, result, finalized_at)

    monkeypatch.setattr(completer_module, "_completed", counting)
    job = _job("running")
    _complete_lean_rows(_database_row(job.pk), None)
    assert rebuilt == [job.pk]


@dataclass
class CatalogueArgs:
    payload: dict[str, Any]


@awa_django.job(CatalogueArgs, queue=QUEUE)
def catalogue_complete(job: JobContext[CatalogueArgs]) -> None:
    return None


PAYLOADS = [
    {"n": 1e16, "big": 10**20, "text": "caf\u00e9 \u2603", "nested": {"a": [1, 2.5, None]}},
    {},
]


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("unique", [False, True])
def test_the_enqueued_row_rebuilt_by_written_equals_the_stored_row(
    payload: dict[str, Any], unique: bool
) -> None:
    """jobs._written builds the snapshot `enqueue` returns from its parameters (with and
    without a unique key); it must be the row the database stored."""
    options: dict[str, Any] = {"unique": awa_django.UniqueOpts()} if unique else {}
    job = awa_django.enqueue(
        CatalogueArgs(payload), tags=["a", "b"], metadata={"m": 1}, priority=1, **options
    )
    assert _differences(job, _database_row(job.id)) == {}


WRITTEN_COLUMNS: list[dict[str, Any]] = [
    {"state": "available", "run_at": None, "django_task": None, "tags": []},
    {
        "state": "scheduled",
        "run_at": dt.datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC),
        "django_task": '{"backend": "default", "n": 1e16, "text": "caf\\u00e9"}',
        "tags": ["x", "caf\u00e9"],
    },
]


@pytest.mark.parametrize("columns", WRITTEN_COLUMNS, ids=["available", "scheduled_task"])
def test_every_column_written_by_job_insert_one_is_rebuilt_as_stored(
    columns: dict[str, Any],
) -> None:
    """_written for the columns `enqueue` itself does not vary above: a run_at the caller
    chose (state scheduled), a django.tasks marker (its JSON re-spelt by jsonb), tags."""
    query = jobs_sql.job_insert_one(
        kind="catalogue_written",
        queue=QUEUE,
        args='{"big": 1e16}',
        priority=3,
        max_attempts=4,
        metadata='{"m": [1, 2.5]}',
        channels=[],
        **columns,
    )
    job = query.run("default")
    assert _differences(job, _database_row(job.id)) == {}


def test_the_inline_and_the_worker_completion_write_the_same_row() -> None:
    """Both schedulers complete through COMPLETE: the inline runner with job_complete_one,
    the worker's completer with the batched statement; the rows they leave are equal."""
    inline_job = awa_django.enqueue(CatalogueArgs({}))
    assert run_available(QUEUE) == 1
    worker_job = awa_django.enqueue(CatalogueArgs({}))
    claim = jobs_sql.job_claim_many(
        queue=QUEUE, limit=1, worker_id="w", deadline_seconds=0, lease_now=True
    )
    (claimed,) = claim.run("default")
    _complete_lean_rows(claimed, None)
    assert not ActiveLease.objects.filter(job_id=worker_job.id).exists()
    inline, worker = _row(inline_job.id), _row(worker_job.id)
    for row in (inline, worker):  # the claim's: which worker, under which lease
        del row["run_lease"], row["attempted_by"]
    assert inline == worker
    assert (worker["state"], worker["attempt"], worker["finalized_at"]) == ("completed", 1, True)


# -- exhausted? dead-lettered? one rule in two languages -----------------------------------
def test_the_sql_rules_decide_as_the_python_rules_over_every_row() -> None:
    """A worker's outcome decides in Python (outcomes.py), rescues and callback failures in
    SQL: both are written in transitions.py; here they must agree on every row."""
    rows = [
        (attempt, max_attempts, queue)
        for max_attempts in (1, 2, 5, 32766)
        for attempt in (0, 1, max_attempts - 1, max_attempts, max_attempts + 1)
        for queue in ("plain", "dlq", "dlq2", "")
    ]
    dead_letter_queues = ["dlq", "dlq2"]
    sql = (
        f"SELECT {transitions.exhausted_sql('j')}, {transitions.dead_lettered_sql('j')}"
        " FROM unnest(%(attempts)s::int2[], %(maxes)s::int2[], %(queues)s::text[])"
        " AS j(attempt, max_attempts, queue)"
    )
    params: dict[str, Any] = {
        "attempts": [r[0] for r in rows],
        "maxes": [r[1] for r in rows],
        "queues": [r[2] for r in rows],
        "dead_letter_queues": dead_letter_queues,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        decided = [tuple(row) for row in cursor.fetchall()]
    expected = [
        (
            transitions.exhausted(attempt, max_attempts),
            transitions.dead_lettered(queue, dead_letter_queues),
        )
        for attempt, max_attempts, queue in rows
    ]
    assert decided == expected
    assert {exhausted for exhausted, _ in decided} == {True, False}  # both sides were met
    assert {dead for _, dead in decided} == {True, False}


# -- fail and retry later: the worker's outcome, a callback's failure, every rescue ---------
def _lease_stale(job: Job) -> None:
    ActiveLease.objects.filter(job_id=job.pk).update(
        heartbeat_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    )


def _lease_past_deadline(job: Job) -> None:
    ActiveLease.objects.filter(job_id=job.pk).update(
        deadline_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    )


def _callback_expired(job: Job) -> None:
    Job.objects.filter(id=job.pk).update(callback_timeout_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))


DLQ: list[str] = []  # the dead-letter queues a case runs with (set per test)
# selector: (the state the job is in before, how the move is applied)
Cases = dict[str, tuple[str, Callable[[Job], object]]]


def _by_worker(move: transitions.Move) -> Callable[[Job], object]:
    def write(job: Job) -> object:
        query = jobs_sql.job_set_state_if_running(
            id=job.pk,
            run_lease=job.run_lease,
            move=move,
            error="gone",
            terminal=move is transitions.FAIL,
        )
        return query.run("default")

    return write


def _by_rescue(
    prepare: Callable[[Job], None], rescue: Callable[..., Any]
) -> Callable[[Job], object]:
    def write(job: Job) -> object:
        prepare(job)
        query = rescue(limit=10, message="gone", dead_letter_queues=DLQ)
        rows = query.run("default")
        assert [row.id for row in rows] == [job.pk]
        return rows

    return write


def _heartbeat_rescue(**params: Any) -> Any:
    return maintenance_sql.job_rescue_stale_heartbeat(staleness_seconds=60, **params)


FAILING: Cases = {
    "worker_attempt": ("running", _by_worker(transitions.FAIL)),
    "callback_id": (
        "waiting_external",
        lambda job: callbacks_sql.job_fail_external(
            callback_id=_token(job), run_lease=None, error="gone", dead_letter_queues=DLQ
        ).run("default"),
    ),
    "rescue_heartbeat": ("running", _by_rescue(_lease_stale, _heartbeat_rescue)),
    "rescue_deadline": (
        "running",
        _by_rescue(_lease_past_deadline, maintenance_sql.job_rescue_deadline),
    ),
    "rescue_callback": (
        "waiting_external",
        _by_rescue(_callback_expired, maintenance_sql.job_rescue_expired_callback),
    ),
}
RETRYING = {
    "worker_attempt": ("running", _by_worker(transitions.RETRY_LATER)),
    **{name: case for name, case in FAILING.items() if name.startswith("rescue")},
}


def _moved_row(job_id: int) -> dict[str, Any]:
    """_row, with the error entry's time normalised and whether run_at is in the future."""
    row = _row(job_id)
    stored = Job.objects.get(id=job_id)
    row["errors"] = [entry | {"at": "at" in entry} for entry in row["errors"]]
    row["run_at"] = stored.run_at > (stored.finalized_at or stored.run_at)
    return row


def _moved_through(cases: Cases, attempt: int) -> dict[str, dict[str, Any]]:
    """Each case's row, from a job with a registered callback and an unread resume payload
    (the early-callback race of §3.2): an attempt that ends consumes both, whoever ends it."""
    rows = {}
    for selector, (before, move) in cases.items():
        job = _job(before, attempt=attempt, max_attempts=3, **_callback_pending())
        move(job)
        assert not ActiveLease.objects.filter(job_id=job.pk).exists(), selector
        rows[selector] = _moved_row(job.pk)
    return rows


def _callback_pending() -> dict[str, Any]:
    """A registered callback (its own id: a unique index) and an unread resume payload."""
    return {
        "callback_id": uuid.uuid4(),
        "callback_timeout_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
        "callback_result": {"early": True},
    }


def test_fail_leaves_the_same_row_through_every_selector() -> None:
    rows = _moved_through(FAILING, attempt=3)
    first = rows["worker_attempt"]
    assert all(row == first for row in rows.values()), rows
    assert (first["state"], first["finalized_at"], first["callback_id"]) == ("failed", True, False)
    assert (first["callback_timeout_at"], first["callback_result"]) == (False, None)
    assert first["progress"] == {"percent": 50}  # kept: it shows how far the job got
    assert first["errors"][-1] == {"error": "gone", "attempt": 3, "at": True, "terminal": True}


def test_retry_later_leaves_the_same_row_through_every_selector() -> None:
    rows = _moved_through(RETRYING, attempt=2)
    first = rows["worker_attempt"]
    assert all(row == first for row in rows.values()), rows
    assert (first["state"], first["run_at"], first["callback_id"]) == ("retryable", True, False)
    assert (first["callback_timeout_at"], first["callback_result"]) == (False, None)
    assert first["errors"][-1] == {"error": "gone", "attempt": 2, "at": True}


DEAD_LETTER_REASONS = {
    "worker_attempt": "max_attempts_exhausted",
    "callback_id": "callback_failed",
    "rescue_heartbeat": "max_attempts_exhausted",
    "rescue_deadline": "max_attempts_exhausted",
    "rescue_callback": "callback_timeout",
}


def _dead_letter_by_worker(job: Job) -> object:
    query = dead_letters_sql.job_dead_letter_if_running(
        id=job.pk,
        run_lease=job.run_lease,
        reason="max_attempts_exhausted",
        error="gone",
        error_type=None,
        terminal=True,
        progress=None,
    )
    return query.run("default")


def test_a_dead_letter_queue_files_the_same_dead_letter_through_every_selector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "DLQ", [QUEUE])
    cases = FAILING | {"worker_attempt": ("running", _dead_letter_by_worker)}
    letters = {}
    for selector, (before, move) in cases.items():
        job = _job(before, attempt=3, max_attempts=3, callback_result=None)
        move(job)
        assert not Job.objects.filter(id=job.pk).exists(), selector
        assert not ActiveLease.objects.filter(job_id=job.pk).exists(), selector
        letter: dict[str, Any] = dict(DeadLetter.objects.filter(id=job.pk).values().get())
        assert letter.pop("reason") == DEAD_LETTER_REASONS[selector], selector
        del letter["id"], letter["created_at"], letter["dead_lettered_at"]
        letter["errors"] = [entry | {"at": "at" in entry} for entry in letter["errors"]]
        letters[selector] = letter
    first = letters["worker_attempt"]
    assert all(letter == first for letter in letters.values()), letters
    assert first["errors"][-1] == {"error": "gone", "attempt": 3, "at": True, "terminal": True}


# -- promote: scheduled and retryable alike ------------------------------------------------
def test_promote_leaves_the_same_row_from_every_state_it_takes() -> None:
    rows: dict[str, int] = {}
    past = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    with _listening(channel_for(QUEUE)) as heard:
        for state in transitions.PROMOTE.sources:
            job = _job(state, run_at=past, priority=1, original_priority=3, progress=None)
            rows[str(state)] = job.pk
        assert maintenance_sql.job_promote_due(limit=10).run("default") == len(rows)
    promoted = {state: _row(job_id) for state, job_id in rows.items()}
    first = promoted["scheduled"]
    assert all(row == first for row in promoted.values())
    assert (first["state"], first["priority"], first["original_priority"]) == ("available", 3, None)
    assert heard and {channel for channel, _ in heard} == {channel_for(QUEUE)}


# -- both schedulers write the catalogue's moves -------------------------------------------
def _applies(move: transitions.Move, job: Job) -> None:
    """`job`'s committed row shows every literal column `move` sets."""
    assert job.state == move.state
    for column, value in move.sets:
        stored = getattr(job, column)
        if value == "NULL":
            assert stored is None, column
        elif value == "now()":
            assert stored is not None, column
        elif value.isdigit():
            assert stored == int(value), column


# handler mode, max_attempts: the move its outcome is (every move of ATTEMPT_MOVES but the
# hand-back, which only the worker makes: below)
WORKER_OUTCOMES = {
    ("complete", 3): transitions.COMPLETE,
    ("raise", 3): transitions.RETRY_LATER,
    ("raise", 1): transitions.FAIL,
    ("raise_terminal", 3): transitions.FAIL,
    ("retry_after", 3): transitions.RETRY_AFTER,
    ("retry_after", 1): transitions.FAIL,
    ("snooze", 3): transitions.SNOOZE,
    ("cancel", 3): transitions.CANCEL,
    ("park", 3): transitions.PARK,
}


@pytest.mark.parametrize("scheduler", ["inline", "worker"])
@pytest.mark.parametrize("outcome", list(WORKER_OUTCOMES), ids=lambda o: f"{o[0]}-{o[1]}")
def test_both_schedulers_write_the_catalogued_move(
    scheduler: str, outcome: tuple[str, int]
) -> None:
    mode, max_attempts = outcome
    move = WORKER_OUTCOMES[outcome]
    job_id = attempts.enqueue(mode, max_attempts=max_attempts)
    job, events = attempts.run_attempt(scheduler, job_id)
    _applies(move, job)
    assert _names(events) == ["Started", *_announced(move)]
    if move is transitions.RETRY_LATER:
        assert job.finalized_at is not None and job.run_at > job.finalized_at


def _outcome_row(job_id: int) -> dict[str, Any]:
    """_row without what names the scheduler (attempted_by, the claim's run_lease), each
    error entry with its first line only (a trace's frames are the scheduler's own), and
    whether run_at is later than the attempt."""
    row = _row(job_id)
    stored = Job.objects.get(id=job_id)
    del row["attempted_by"], row["run_lease"]
    row["errors"] = [
        entry | {"error": entry["error"].partition("\n")[0], "at": "at" in entry}
        for entry in row["errors"]
    ]
    row["run_at"] = stored.run_at > (stored.attempted_at or stored.run_at)
    return row


@pytest.mark.parametrize("outcome", list(WORKER_OUTCOMES), ids=lambda o: f"{o[0]}-{o[1]}")
def test_both_schedulers_leave_the_same_row_and_events(outcome: tuple[str, int]) -> None:
    """The inline runner and the worker apply a handler's outcome through the one attempt
    selector (job_set_state_if_running by move, or COMPLETE): the rows they leave and the
    events they fire are the same, field by field."""
    mode, max_attempts = outcome
    rows, events = {}, {}
    for scheduler in ("inline", "worker"):
        job_id = attempts.enqueue(mode, max_attempts=max_attempts)
        _, fired = attempts.run_attempt(scheduler, job_id)
        rows[scheduler], events[scheduler] = _outcome_row(job_id), _names(fired)
    assert rows["inline"] == rows["worker"]
    announced = _announced(WORKER_OUTCOMES[outcome])
    assert events["inline"] == events["worker"] == ["Started", *announced]


def test_the_worker_hands_back_a_kind_it_lacks_as_it_snoozes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HAND_BACK is SNOOZE with the attempt's entry: the same row but for that entry. Only
    the worker hands back (within UNKNOWN_KIND_GRACE; the inline runner has no grace)."""
    monkeypatch.setattr(attempts, "Executor", functools.partial(Executor, unknown_kind_grace=3600))
    assert transitions.HAND_BACK.sets == transitions.SNOOZE.sets
    handed = JobFactory(queue=attempts.QUEUE, kind="catalogue_nobody", max_attempts=3).id
    _, handed_events = attempts.run_attempt("worker", handed)
    snoozed = attempts.enqueue("snooze", seconds=5.0)
    _, snoozed_events = attempts.run_attempt("worker", snoozed)
    assert _names(handed_events) == _names(snoozed_events) == ["Started"]
    handed_row, snoozed_row = _outcome_row(handed), _outcome_row(snoozed)
    (entry,) = handed_row.pop("errors")
    assert entry["type"] == "awa_django.exceptions.UnknownJobKind"
    assert snoozed_row.pop("errors") == []
    for row in (handed_row, snoozed_row):
        del row["kind"], row["args"], row["metadata"], row["django_task"], row["tags"]
    assert handed_row == snoozed_row
    assert (snoozed_row["state"], snoozed_row["attempt"], snoozed_row["finalized_at"]) == (
        "scheduled",
        0,
        False,
    )


def _cancel_by_attempt(job: Job) -> object:
    query = jobs_sql.job_set_state_if_running(
        id=job.pk, run_lease=job.run_lease, move=transitions.CANCEL
    )
    return query.run("default")


def test_a_running_job_cancelled_by_its_attempt_or_an_operator_leaves_the_same_row() -> None:
    """T19 from `running`: the handler's Cancel (by id + run_lease) and an operator's cancel
    (by ids, by a bulk window) leave the same row, the callback and any unread resume
    payload consumed."""
    selectors = {**CANCEL_SELECTORS, "attempt": _cancel_by_attempt}
    rows = {}
    for selector, cancel in selectors.items():
        job = _job("running", **_callback_pending())
        cancel(job)
        assert not ActiveLease.objects.filter(job_id=job.pk).exists(), selector
        rows[selector] = _row(job.pk)
    assert rows["attempt"] == rows["ids"] == rows["bulk_window"]
    row = rows["attempt"]
    assert (row["state"], row["finalized_at"], row["callback_id"]) == ("cancelled", True, False)
    assert (row["callback_timeout_at"], row["callback_result"]) == (False, None)


def test_a_retried_dead_letter_is_the_row_an_operator_retry_leaves() -> None:
    """T26 and T21 reset the same columns (DEAD_LETTER_RETRY is RETRY; the operator's adds
    the priority restore, a no-op on a job never aged): the rows are equal, but for the
    progress, which a dead letter's retry does not carry back."""
    fields: dict[str, Any] = {"finalized_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}
    by_operator, dead = _job("failed", **fields), _job("failed", **fields)
    Job.objects.filter(id=dead.pk).update(queue="catalogue_dead")
    client = awa_django.Client()
    assert client.dead_letter_failed(queue="catalogue_dead") == 1
    Job.objects.filter(id=by_operator.pk).update(queue="catalogue_dead")
    client.retry_many([by_operator.pk])
    revived = client.retry_dead_letter(dead.pk)
    assert revived.id == dead.pk and not DeadLetter.objects.filter(id=dead.pk).exists()
    operated, retried = _row(by_operator.pk), _row(dead.pk)
    assert operated.pop("progress") == {"percent": 50} and retried.pop("progress") is None
    assert operated == retried
    assert (retried["state"], retried["attempt"], retried["run_lease"]) == ("available", 0, 7)
    assert retried["errors"][0]["error"] == "earlier" and retried["finalized_at"] is False


# -- the same follow-ups through every selector -------------------------------------------
@dataclass
class Followed:
    outcome: str
    attempt: int


def _followed(outcome: str, job: JobSnapshot) -> awa_django.FollowUp:
    return awa_django.follow_up(Followed(outcome, job.attempt), queue="followed")


def _follow_ups() -> list[tuple[str, int]]:
    rows = Job.objects.filter(kind="followed").order_by("id").values_list("args", flat=True)
    return [(args["outcome"], args["attempt"]) for args in rows]


def _rescue_now(job_id: int) -> None:
    """Rescue `job_id` (a running job whose lease is stale) as the leader does, follow-up
    jobs included."""
    ActiveLease.objects.filter(job_id=job_id).update(
        heartbeat_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    )

    with_db(lambda db: Rescuer(db, staleness=90, emit=lambda event: None).run_once())


_ARGS = {"mode": "complete", "seconds": 0.0, "note": ""}


@pytest.mark.parametrize("scheduler", ["inline", "worker"])
def test_complete_and_fail_build_the_same_follow_ups_through_every_selector(
    scheduler: str,
) -> None:
    awa_django.on_completed_enqueue(
        attempts.Conformance, lambda args, event: [_followed("completed", event.job)]
    )
    awa_django.on_exhausted_enqueue(
        attempts.Conformance, lambda args, event: [_followed("exhausted", event.job)]
    )
    # COMPLETE: the worker's outcome, then a callback's resolution of a parked attempt.
    attempts.run_attempt(scheduler, attempts.enqueue("complete"))
    parked = attempts.enqueue("park")
    attempts.run_attempt(scheduler, parked)
    awa_django.Client().complete_external(_token(Job.objects.get(id=parked)))
    # FAIL: the worker's last attempt, a callback's failure, a rescue of a last attempt.
    attempts.run_attempt(scheduler, attempts.enqueue("raise", max_attempts=1))
    parked = attempts.enqueue("park", max_attempts=1)
    attempts.run_attempt(scheduler, parked)
    awa_django.Client().fail_external(_token(Job.objects.get(id=parked)), "gone")
    rescued = _job("running", kind="conformance", attempt=1, max_attempts=1, args=_ARGS)
    _rescue_now(rescued.pk)
    assert _follow_ups() == [("completed", 1)] * 2 + [("exhausted", 1)] * 3
