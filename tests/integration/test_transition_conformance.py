"""One committed transition, one event (DESIGN §5 and §7, ADR-015, decision 035): for
every transition a job can make — worker outcomes on both schedulers, callback
resolutions, cancels, and rescues of each reason on the last and a non-last attempt, with
and without dead-letter routing — the number of outcome events delivered equals the
number of committed transitions that the table maps to an event.

The committed transitions are counted by the database itself, independently of the code
under test: a trigger on `awa_jobs_hot` logs every committed change of `state` (and every
row that leaves the table, which here means a move to the dead letters) into a table of
its own. A trigger row commits iff its transition does, so the log holds exactly the
committed transitions.

Transactional tests: the worker and the leader write on their own connections.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

import awa_django
from awa_django import Client
from awa_django.events import (
    Cancelled,
    Completed,
    Event,
    Exhausted,
    Rescued,
    Retried,
    Started,
    WaitingForCallback,
)
from awa_django.execution.inline import run_available
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.testing import capture_events
from awa_django.worker.database import Database
from awa_django.worker.maintenance.announcer import Announcer
from awa_django.worker.maintenance.rescuer import Rescuer
from tests.factories import JobFactory
from tests.integration.test_attempt_conformance import (
    QUEUE,
    WORKER_ID,
    Conformance,
    enqueue,
    run_attempt,
)
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

CLAIM = ("available", "running")
# The transitions DESIGN §5/§7 give no event: Snooze, and resume_external (the resumed
# attempt reports its own outcome).
SILENT = {("running", "scheduled"), ("waiting_external", "running")}
AGO = dt.timedelta(hours=1)

_LOG = """
CREATE TABLE conformance_transitions (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, old_state text NOT NULL,
    new_state text NOT NULL
);
CREATE FUNCTION conformance_log_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO conformance_transitions (job_id, old_state, new_state)
        VALUES (OLD.id, OLD.state, 'dead_letter');
        RETURN OLD;
    END IF;
    INSERT INTO conformance_transitions (job_id, old_state, new_state)
    VALUES (NEW.id, OLD.state, NEW.state);
    RETURN NEW;
END $$;
CREATE TRIGGER conformance_transitions AFTER UPDATE ON awa_jobs_hot FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION conformance_log_transition();
CREATE TRIGGER conformance_dead_letters AFTER DELETE ON awa_jobs_hot FOR EACH ROW
    EXECUTE FUNCTION conformance_log_transition();
"""
_UNLOG = """
DROP TRIGGER IF EXISTS conformance_transitions ON awa_jobs_hot;
DROP TRIGGER IF EXISTS conformance_dead_letters ON awa_jobs_hot;
DROP FUNCTION IF EXISTS conformance_log_transition();
DROP TABLE IF EXISTS conformance_transitions;
"""


@pytest.fixture(autouse=True)
def transition_log() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(_UNLOG + _LOG)
    yield
    with connection.cursor() as cursor:
        cursor.execute(_UNLOG)


@pytest.fixture(params=["inline", "worker"])
def scheduler(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def committed(job_id: int) -> list[tuple[str, str]]:
    """The job's committed state transitions, in commit order."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT old_state, new_state FROM conformance_transitions WHERE job_id = %s "
            "ORDER BY id",
            [job_id],
        )
        return [(old, new) for old, new in cursor.fetchall()]


def names(events: list[Event]) -> list[str]:
    return [type(event).__name__ for event in events]


def one_event_per_transition(job_id: int, events: list[Event]) -> list[Event]:
    """Asserts the job's outcome events (all but Started) are as many as its committed
    transitions that map to an event, and returns them."""
    moves = committed(job_id)
    mine = [event for event in events if event.job.id == job_id]
    outcomes = [event for event in mine if not isinstance(event, Started)]
    eventful = [move for move in moves if move != CLAIM and move not in SILENT]
    assert len(outcomes) == len(eventful), (moves, names(mine))
    return outcomes


# -- worker outcomes (the handler table of DESIGN §5), on both schedulers ------------------
WORKER_OUTCOMES: list[tuple[str, int, tuple[str, str], type[Event] | None]] = [
    ("complete", 3, ("running", "completed"), Completed),
    ("retry_after", 3, ("running", "retryable"), Retried),
    ("retry_after", 1, ("running", "failed"), Exhausted),
    ("snooze", 3, ("running", "scheduled"), None),
    ("cancel", 3, ("running", "cancelled"), Cancelled),
    ("park", 3, ("running", "waiting_external"), WaitingForCallback),
    ("raise", 3, ("running", "retryable"), Retried),
    ("raise", 1, ("running", "failed"), Exhausted),
    ("raise_terminal", 3, ("running", "failed"), Exhausted),
    # The Client's cancel is the one transition; the attempt's own outcome is stale.
    ("cancelled_meanwhile", 3, ("running", "cancelled"), Cancelled),
]


@pytest.mark.parametrize(
    ("mode", "max_attempts", "move", "event"),
    WORKER_OUTCOMES,
    ids=[f"{mode}-of-{m}" for mode, m, _, _ in WORKER_OUTCOMES],
)
def test_a_worker_outcome_fires_one_event_per_committed_transition(
    scheduler: str,
    mode: str,
    max_attempts: int,
    move: tuple[str, str],
    event: type[Event] | None,
) -> None:
    job_id = enqueue(mode, seconds=5, max_attempts=max_attempts)
    _, events = run_attempt(scheduler, job_id)
    assert committed(job_id) == [CLAIM, move]
    assert names([e for e in events if isinstance(e, Started)]) == ["Started"]  # one claim
    outcomes = one_event_per_transition(job_id, events)
    assert names(outcomes) == ([event.__name__] if event else [])


@pytest.mark.parametrize(
    "fields",
    [{"kind": "conformance_nobody"}, {"kind": "conformance", "args": {"mode": 7}}],
    ids=["unknown_kind", "args_that_do_not_fit"],
)
def test_a_job_that_cannot_run_fires_one_exhausted(scheduler: str, fields: dict[str, Any]) -> None:
    job_id = JobFactory(queue=QUEUE, **fields).id
    _, events = run_attempt(scheduler, job_id)
    assert committed(job_id) == [CLAIM, ("running", "failed")]
    assert names(one_event_per_transition(job_id, events)) == ["Exhausted"]


# -- callback resolutions (DESIGN §6, docs/hooks.md) ---------------------------------------
Resolve = Callable[[Client, Any], object]
RESOLUTIONS: list[tuple[str, Resolve, str | None, type[Event] | None]] = [
    ("complete_external", lambda c, cb: c.complete_external(cb, {"ok": 1}), "completed", Completed),
    ("fail_external", lambda c, cb: c.fail_external(cb, "refused"), "failed", Exhausted),
    ("retry_external", lambda c, cb: c.retry_external(cb), "available", Retried),
    ("resume_external", lambda c, cb: c.resume_external(cb, {"ok": 1}), "running", None),
    ("heartbeat_callback", lambda c, cb: c.heartbeat_callback(cb, 60), None, None),
    ("resolve_complete", lambda c, cb: c.resolve_callback(cb, None, "complete"), "completed",
     Completed),
    ("resolve_fail", lambda c, cb: c.resolve_callback(cb, None, "fail"), "failed", Exhausted),
    ("resolve_ignore", lambda c, cb: c.resolve_callback(cb, None, "ignore"), None, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("verb", "resolve", "state", "event"), RESOLUTIONS, ids=[r[0] for r in RESOLUTIONS]
)
def test_a_callback_resolution_fires_one_event_per_committed_transition(
    verb: str, resolve: Resolve, state: str | None, event: type[Event] | None
) -> None:
    job_id = enqueue("park")
    _, parked = run_attempt("inline", job_id)
    callback_id = Job.objects.get(id=job_id).callback_id
    with capture_events() as captured:
        resolve(Client(), callback_id)
    park = ("running", "waiting_external")
    assert committed(job_id) == [CLAIM, park] + ([("waiting_external", state)] if state else [])
    outcomes = one_event_per_transition(job_id, parked + list(captured.events))
    assert names(outcomes) == ["WaitingForCallback"] + ([event.__name__] if event else [])


# -- cancels ------------------------------------------------------------------------------
def _available() -> int:
    return enqueue("complete")


def _scheduled() -> int:
    return awa_django.enqueue(Conformance("complete"), run_at=timezone.now() + AGO).id


def _running() -> int:
    job_id = enqueue("complete")
    claim_with_lease()
    return job_id


def _retryable() -> int:
    job_id = enqueue("raise")
    run_attempt("inline", job_id)
    return job_id


def _parked() -> int:
    job_id = enqueue("park")
    run_attempt("inline", job_id)
    return job_id


def _completed() -> int:
    job_id = enqueue("complete")
    run_attempt("inline", job_id)
    return job_id


CANCELS: list[tuple[Callable[[], int], str | None]] = [
    (_available, "available"),
    (_scheduled, "scheduled"),
    (_running, "running"),
    (_retryable, "retryable"),
    (_parked, "waiting_external"),
    (_completed, None),  # terminal: no transition, no event
]


@pytest.mark.parametrize(("make", "state"), CANCELS, ids=[c[0].__name__[1:] for c in CANCELS])
def test_a_cancel_fires_one_event_per_committed_transition(
    make: Callable[[], int], state: str | None
) -> None:
    job_id = make()
    before = committed(job_id)
    with capture_events() as captured:
        Client().cancel(job_id)
    assert committed(job_id)[len(before) :] == ([(state, "cancelled")] if state else [])
    cancels = [e for e in captured.events if e.job.id == job_id]
    assert names(cancels) == (["Cancelled"] if state else [])
    # Over the job's whole life, outcome events and committed transitions still match.
    earlier = len([m for m in before if m != CLAIM and m not in SILENT])
    assert len(cancels) + earlier == len(
        [m for m in committed(job_id) if m != CLAIM and m not in SILENT]
    )


# -- rescues: each reason, on a non-last and on the last attempt, dead-lettered or not -----
MESSAGES = {
    "stale_heartbeat": "heartbeat stale: worker presumed dead",
    "deadline_exceeded": "hard deadline exceeded",
    "expired_callback": "callback timed out",
}


def claim_with_lease() -> JobSnapshot:
    """The conformance queue's one available job, claimed with its lease written at once."""
    (row,) = jobs_sql.job_claim_many(
        queue=QUEUE, limit=1, worker_id=WORKER_ID, deadline_seconds=300, lease_now=True
    ).run("default")
    return row


def due_for_rescue(reason: str, max_attempts: int) -> tuple[int, list[Event]]:
    """A job whose attempt `reason` applies to: running with a stale heartbeat or a passed
    deadline, or parked with its callback timed out. Its events so far."""
    if reason == "expired_callback":
        job_id = enqueue("park", max_attempts=max_attempts)
        _, events = run_attempt("inline", job_id)
        Job.objects.filter(id=job_id).update(callback_timeout_at=timezone.now() - AGO)
        return job_id, events
    job_id = enqueue("complete", max_attempts=max_attempts)
    claim_with_lease()
    column = "heartbeat_at" if reason == "stale_heartbeat" else "deadline_at"
    ActiveLease.objects.filter(job_id=job_id).update(**{column: timezone.now() - AGO})
    return job_id, []


RESCUES = [
    (reason, last, dead) for reason in MESSAGES for last in (False, True) for dead in (False, True)
]


@pytest.mark.parametrize(
    ("reason", "last", "dead_letter"),
    RESCUES,
    ids=[
        f"{r}-{'last' if last else 'not_last'}{'-dead_letter' if dead else ''}"
        for r, last, dead in RESCUES
    ],
)
def test_a_rescue_fires_one_event_per_committed_transition(
    reason: str, last: bool, dead_letter: bool
) -> None:
    """A rescue that retries fires Rescued; one that ends the job fires Exhausted with the
    rescue's reason, never both (decision 035)."""
    job_id, before = due_for_rescue(reason, max_attempts=1 if last else 3)
    emitted: list[Event] = []

    async def rescue(db: Database) -> list[tuple[str, JobSnapshot]]:
        queues = [QUEUE] if dead_letter else []
        return await Rescuer(db, 90, emitted.append, dead_letter_queues=queues).run_once()

    assert [(r, row.id) for r, row in with_db(rescue)] == [(reason, job_id)]
    source = "waiting_external" if reason == "expired_callback" else "running"
    ended = ("dead_letter" if dead_letter else "failed") if last else "retryable"
    assert committed(job_id)[-1] == (source, ended)
    one_event_per_transition(job_id, before + emitted)
    (event,) = emitted  # the one rescue transition: one event
    if not last:
        assert isinstance(event, Rescued) and event.reason == reason
        assert event.job.state == "retryable"
        return
    assert isinstance(event, Exhausted) and event.reason == reason
    assert (event.error, event.attempt, event.dead_lettered) == (MESSAGES[reason], 1, dead_letter)
    assert event.job.state == "failed"


# -- workflows (decision 043): the moves of `waiting_parents` ------------------------------
# The fan-in trigger's promotions, discards and restores announce nothing (like promotion):
# each is audited here as a committed transition with no event. Its cancels (policy
# `cancel`) announce Cancelled through the outbox (decision 046): the inline runner claims
# it after the parent's attempt, the worker's leader by its announcer. An operator's cancel
# of a waiting child is the ordinary cancel (CANCELS above has it) and fires Cancelled.
SILENT |= {("waiting_parents", "available"), ("cancelled", "waiting_parents")}
PARENT_FAILED = "cancelled: a parent failed"


def _waiting_child(policy: str = "cancel", after: int | None = None) -> tuple[int, int]:
    parent = after if after is not None else enqueue("complete", max_attempts=1)
    child = awa_django.enqueue(
        Conformance("complete"), after=[parent], on_parent_failure=policy, queue="wf-audit"
    )
    return parent, child.id


def _with_events(step: Callable[[], object]) -> list[Event]:
    with capture_events() as captured:
        step()
    return list(captured.events)


def _announced() -> list[Event]:
    """What the leader's announcer emits now (the worker scheduler runs no leader)."""
    emitted: list[Event] = []

    async def announce(db: Database) -> list[Event]:
        return await Announcer(db, emitted.append).run_once()

    assert with_db(announce) == emitted
    return emitted


def _run_parent(scheduler: str, parent: int) -> list[Event]:
    """The parent's attempt on `scheduler`, then (worker) the leader's announcements."""
    _, events = run_attempt(scheduler, parent)
    return events + (_announced() if scheduler == "worker" else [])


def test_a_waiting_child_is_promoted_silently_by_its_parents_completion(scheduler: str) -> None:
    parent, child = _waiting_child()
    events = _run_parent(scheduler, parent)
    assert committed(child) == [("waiting_parents", "available")]
    assert [e for e in events if e.job.id == child] == []


def test_a_failed_parent_discards_its_waiting_child_silently(scheduler: str) -> None:
    parent, child = _waiting_child("discard")
    Job.objects.filter(id=parent).update(args={"mode": "raise_terminal"})
    events = _run_parent(scheduler, parent)
    # The audit logs any deletion as 'dead_letter'; a discarded child is deleted.
    assert committed(child) == [("waiting_parents", "dead_letter")]
    assert [e for e in events if e.job.id == child] == []


def test_a_failed_parent_cancels_its_waiting_child_with_one_cancelled(scheduler: str) -> None:
    parent, child = _waiting_child("cancel")
    Job.objects.filter(id=parent).update(args={"mode": "raise_terminal"})
    events = _run_parent(scheduler, parent)
    assert committed(child) == [("waiting_parents", "cancelled")]
    (event,) = one_event_per_transition(child, events)
    assert isinstance(event, Cancelled) and event.reason == PARENT_FAILED
    assert event.job.state == "cancelled" and event.job.errors[-1]["error"] == PARENT_FAILED
    # Announced once: nothing is left to announce, on either path.
    assert _announced() == [] and _with_events(lambda: run_available()) == []


def test_a_cascade_announces_each_cancelled_level_once(scheduler: str) -> None:
    parent, child = _waiting_child("cancel")
    _, grandchild = _waiting_child("cancel", after=child)
    Job.objects.filter(id=parent).update(args={"mode": "raise_terminal"})
    events = _run_parent(scheduler, parent)
    for job_id in (child, grandchild):
        assert committed(job_id) == [("waiting_parents", "cancelled")]
        (event,) = one_event_per_transition(job_id, events)
        assert isinstance(event, Cancelled) and event.reason == PARENT_FAILED
    cancels = [e.job.id for e in events if isinstance(e, Cancelled)]
    assert cancels == [child, grandchild]  # in the order the trigger cancelled them
    assert _announced() == []


def test_a_retried_parent_restores_its_cancelled_child_silently() -> None:
    parent, child = _waiting_child("cancel")
    Job.objects.filter(id=parent).update(args={"mode": "raise_terminal"})
    run_attempt("inline", parent)
    events = _with_events(lambda: Client().retry(parent))
    assert committed(child) == [("waiting_parents", "cancelled"), ("cancelled", "waiting_parents")]
    assert [e for e in events if e.job.id == child] == []


def test_an_operator_cancel_of_a_waiting_parent_announces_its_childs_cancel() -> None:
    parent, child = _waiting_child("cancel")
    events = _with_events(lambda: Client().cancel(parent)) + _announced()
    assert names([e for e in events if e.job.id == parent]) == ["Cancelled"]
    (event,) = one_event_per_transition(child, events)
    assert isinstance(event, Cancelled) and event.reason == PARENT_FAILED


def test_an_operator_cancel_of_a_waiting_child_fires_cancelled() -> None:
    _, child = _waiting_child()
    events = _with_events(lambda: Client().cancel(child))
    assert committed(child) == [("waiting_parents", "cancelled")]
    assert names([e for e in events if e.job.id == child]) == ["Cancelled"]
