"""Every parent outcome by every `on_parent_failure` policy, the parent's attempt run on
both schedulers (the inline runner and the worker's Executor with its batched Completer),
so each statement that can end a parent — the batched completion, the individual outcome
write, the dead-letter move, the rescue, the operator's cancel — is shown to move the
child through the trigger in its own transaction (decision 043).

Each child has two parents: the parent under test P and a sibling S that is held back
(scheduled in the future) until P's outcome is checked, so `run` is seen waiting for
every parent, and `cancel`/`discard` are seen acting at once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

import awa_django
from awa_django import Client
from awa_django.execution.context import JobContext
from awa_django.execution.inline import run_available
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.database import Database
from awa_django.worker.maintenance.rescuer import Rescuer
from tests.integration.test_attempt_conformance import (
    ATTEMPT_TIMEOUT,
    QUEUE,
    WORKER_ID,
    Conformance,
    _run_in_worker,
    run_attempt,
)
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

CHILDREN = "wf-conformance-children"
AGO = dt.timedelta(hours=1)
child_runs: list[int] = []
child_saw: dict[int, list[Any]] = {}


@dataclass
class ConformanceChild:
    label: str


@awa_django.job(ConformanceChild, queue=CHILDREN, max_attempts=1)
def conformance_child(job: JobContext[ConformanceChild]) -> None:
    child_runs.append(job.id)
    child_saw[job.id] = job.parent_results()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    child_runs.clear()
    child_saw.clear()
    yield
    child_runs.clear()
    child_saw.clear()


@pytest.fixture(params=["inline", "worker"])
def scheduler(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


# -- parent outcomes: each drives P (enqueued `available` in QUEUE) to its end ------------
def _attempt(mode: str, max_attempts: int = 3) -> Callable[[str, int], None]:
    def drive(scheduler: str, parent_id: int) -> None:
        Job.objects.filter(id=parent_id).update(
            args={"mode": mode, "seconds": 0.0, "note": ""}, max_attempts=max_attempts
        )
        run_attempt(scheduler, parent_id)

    return drive


def _operator_cancel(scheduler: str, parent_id: int) -> None:
    Client().cancel(parent_id)


def _dead_lettered(scheduler: str, parent_id: int) -> None:
    """The attempt's own dead-letter move (run_attempt reads the row back: it is gone)."""
    Job.objects.filter(id=parent_id).update(args={"mode": "raise_terminal", "seconds": 0.0})
    with override_settings(AWA={"QUEUES": {"default": {}, QUEUE: {"dead_letter": True}}}):
        if scheduler == "inline":
            assert run_available(QUEUE) == 1
        else:
            asyncio.run(asyncio.wait_for(_run_in_worker(), ATTEMPT_TIMEOUT))
    assert Client().dead_letter(parent_id).reason == "terminal_error"


def _claimed(parent_id: int) -> JobSnapshot:
    (row,) = jobs_sql.job_claim_many(
        queue=QUEUE, limit=1, worker_id=WORKER_ID, deadline_seconds=300, lease_now=True
    ).run("default")
    assert row.id == parent_id
    ActiveLease.objects.filter(job_id=parent_id).update(heartbeat_at=timezone.now() - AGO)
    return row


def _rescue(dead_letter: bool = False) -> None:
    async def rescue(db: Database) -> list[tuple[str, JobSnapshot]]:
        queues = [QUEUE] if dead_letter else []
        return await Rescuer(db, 90, lambda e: None, dead_letter_queues=queues).run_once()

    assert len(with_db(rescue)) == 1


def _rescued_then_completed(scheduler: str, parent_id: int) -> None:
    """A rescued attempt is not an end: the child keeps waiting; the next attempt's
    completion releases it."""
    _claimed(parent_id)
    _rescue()
    assert Job.objects.get(id=parent_id).state == "retryable"
    assert _child_state() == "waiting_parents"
    # run_attempt checks attempted_by names its own scheduler only.
    Job.objects.filter(id=parent_id).update(
        state="available", run_at=timezone.now(), attempted_by=[]
    )
    _attempt("complete_with_result")(scheduler, parent_id)


def _rescued_on_last_attempt(scheduler: str, parent_id: int) -> None:
    Job.objects.filter(id=parent_id).update(max_attempts=1)
    _claimed(parent_id)
    _rescue()
    assert Job.objects.get(id=parent_id).state == "failed"


def _rescued_into_dead_letters(scheduler: str, parent_id: int) -> None:
    Job.objects.filter(id=parent_id).update(max_attempts=1)
    _claimed(parent_id)
    _rescue(dead_letter=True)
    assert not Job.objects.filter(id=parent_id).exists()


OUTCOMES: dict[str, tuple[Callable[[str, int], None], bool]] = {
    # name: (drive, parent completed?)
    "completed": (_attempt("complete_with_result"), True),
    "failed_exhausted": (_attempt("raise", max_attempts=1), False),
    "failed_terminal": (_attempt("raise_terminal"), False),
    "cancelled_by_handler": (_attempt("cancel"), False),
    "cancelled_while_running": (_attempt("cancelled_meanwhile"), False),
    "cancelled_by_operator": (_operator_cancel, False),
    "dead_lettered": (_dead_lettered, False),
    "rescued_then_completed": (_rescued_then_completed, True),
    "rescued_on_last_attempt": (_rescued_on_last_attempt, False),
    "rescued_into_dead_letters": (_rescued_into_dead_letters, False),
}
POLICIES = ("cancel", "run", "discard")

_child: list[int] = []


def _child_state() -> str | None:
    return Job.objects.filter(id=_child[0]).values_list("state", flat=True).first()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("outcome", list(OUTCOMES))
def test_each_parent_outcome_applies_each_policy(scheduler: str, outcome: str, policy: str) -> None:
    drive, completed = OUTCOMES[outcome]
    sibling = awa_django.enqueue(Conformance("complete"), run_at=timezone.now() + AGO)
    parent = awa_django.enqueue(Conformance("complete"))
    child = awa_django.enqueue(
        ConformanceChild(outcome), after=[sibling, parent], on_parent_failure=policy
    )
    _child[:] = [child.id]
    assert child.state == "waiting_parents"

    drive(scheduler, parent.id)

    # P ended: only a failure with `cancel` / `discard` acts before the sibling ends.
    early = "waiting_parents" if completed or policy == "run" else None
    early = early or ("cancelled" if policy == "cancel" else None)
    assert _child_state() == early
    assert run_available(CHILDREN) == 0  # never before its parents ended

    Job.objects.filter(id=sibling.id).update(state="available", run_at=timezone.now())
    run_attempt(scheduler, sibling.id)

    runs = completed or policy == "run"
    assert run_available(CHILDREN) == (1 if runs else 0)
    assert child_runs == ([child.id] if runs else [])
    assert run_available(CHILDREN) == 0  # exactly once
    if runs:
        (s, p) = child_saw[child.id]
        assert (s.id, s.state, s.failed) == (sibling.id, "completed", False)
        assert (p.id, p.failed) == (parent.id, not completed)
        assert _child_state() == "completed"
    else:
        assert _child_state() == ("cancelled" if policy == "cancel" else None)
