"""Follow-up jobs of worker outcomes (`on_completed_enqueue` & co.; decision 015) against
both schedulers, with the conformance suite's handler and `run_attempt`: each outcome's
follow-ups are committed with it, get the typed args and the outcome's details, and a
stale or rolled-back outcome leaves none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import awa_django
from awa_django.events import Completed, Retried
from awa_django.storage.models import Job
from tests.integration.test_atomic_conformance import Effect
from tests.integration.test_attempt_conformance import (
    BOOM,
    SEEN,
    Conformance,
    enqueue,
    names,
    outcome_event,
    run_attempt,
)

pytestmark = pytest.mark.django_db(transaction=True)

FOLLOW = "follow"  # no worker of these tests claims from it


@pytest.fixture(params=["inline", "worker"])
def scheduler(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@dataclass
class Next:
    """A follow-up job: which outcome built it, and what the builder saw."""

    outcome: str
    mode: str
    detail: str = ""


def follow_ups() -> list[tuple[str, dict[str, Any]]]:
    """Every follow-up job committed: (queue, args)."""
    return list(Job.objects.filter(kind="next").order_by("id").values_list("queue", "args"))


def _next(outcome: str, args: Conformance, detail: object = "") -> awa_django.FollowUp:
    return awa_django.follow_up(Next(outcome, args.mode, str(detail)), queue=FOLLOW, priority=1)


@pytest.fixture
def builders() -> None:
    """One builder per outcome of Conformance, each recording what it was given."""
    awa_django.on_completed_enqueue(Conformance, lambda a, e: [_next("completed", a, e.job.state)])
    awa_django.on_retried_enqueue(Conformance, lambda a, e: [_next("retried", a, _retried(e))])
    awa_django.on_exhausted_enqueue(
        Conformance, lambda a, e: [_next("exhausted", a, f"{e.attempt}|{_head(e.error)}")]
    )
    awa_django.on_cancelled_enqueue(Conformance, lambda a, e: [_next("cancelled", a, e.reason)])
    awa_django.on_waiting_for_callback_enqueue(
        Conformance, lambda a, e: [_next("waiting", a, e.job.callback_id)]
    )


def _head(error: str) -> str:
    return error.splitlines()[0]


def _retried(event: Retried[Conformance]) -> str:
    assert event.next_run_at is not None
    return f"{event.attempt}|{event.next_run_at.isoformat()}|{_head(event.error)}"


def _args(outcome: str, mode: str, detail: str = "") -> tuple[str, dict[str, Any]]:
    return FOLLOW, {"outcome": outcome, "mode": mode, "detail": detail}


@pytest.mark.usefixtures("builders")
def test_a_completion_commits_its_follow_up(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("complete"))
    assert job.state == "completed"
    assert follow_ups() == [_args("completed", "complete", "completed")]
    assert Job.objects.get(kind="next").priority == 1  # the follow_up() options applied
    outcome_event(events, Completed)


@pytest.mark.usefixtures("builders")
def test_a_retry_commits_its_follow_up_with_the_attempt_and_next_run(scheduler: str) -> None:
    job, _ = run_attempt(scheduler, enqueue("raise"))
    assert job.state == "retryable"
    detail = f"1|{job.run_at.isoformat()}|{BOOM}: boom"
    assert follow_ups() == [_args("retried", "raise", detail)]


@pytest.mark.usefixtures("builders")
def test_an_exhausted_job_commits_its_follow_up(scheduler: str) -> None:
    job, _ = run_attempt(scheduler, enqueue("raise_terminal"))
    assert job.state == "failed"
    detail = "1|awa_django.exceptions.TerminalError: card declined"
    assert follow_ups() == [_args("exhausted", "raise_terminal", detail)]


@pytest.mark.usefixtures("builders")
def test_a_cancel_commits_its_follow_up_with_the_reason(scheduler: str) -> None:
    run_attempt(scheduler, enqueue("cancel", note="customer left"))
    assert follow_ups() == [_args("cancelled", "cancel", "customer left")]


@pytest.mark.usefixtures("builders")
def test_a_park_commits_its_follow_up_with_the_callback(scheduler: str) -> None:
    job_id = enqueue("park")
    job, _ = run_attempt(scheduler, job_id)
    assert job.state == "waiting_external"
    assert follow_ups() == [_args("waiting", "park", str(SEEN[job_id]["token"].id))]


@pytest.mark.usefixtures("builders")
def test_a_snooze_has_no_event_and_no_follow_up(scheduler: str) -> None:
    run_attempt(scheduler, enqueue("snooze", seconds=30))
    assert follow_ups() == []


@pytest.mark.usefixtures("builders")
def test_a_stale_outcome_inserts_no_follow_up(scheduler: str) -> None:
    job, events = run_attempt(scheduler, enqueue("cancelled_meanwhile", note="complete"))
    # The operator's cancel committed its own follow-up; the stale completion none.
    assert job.state == "cancelled"
    assert follow_ups() == [_args("cancelled", "cancelled_meanwhile", "cancelled by operator")]
    assert "Completed" not in names(events)


def _broken(args: Conformance, event: Any) -> list[Next]:
    raise ValueError("no invoice number")


def test_a_failing_completion_builder_rolls_the_completion_back_and_fails_the_attempt(
    scheduler: str,
) -> None:
    awa_django.on_completed_enqueue(Conformance, _broken)
    job, events = run_attempt(scheduler, enqueue("complete"))
    assert (job.state, job.attempt) == ("retryable", 1)
    entry = job.errors[-1]
    assert entry["type"] == "awa_django.exceptions.FollowUpFailed"
    assert "_broken" in entry["error"] and "no invoice number" in entry["error"]
    assert names(events) == ["Started", "Retried"]
    assert follow_ups() == []


def test_a_failing_retry_builder_still_retries_without_follow_ups(scheduler: str) -> None:
    awa_django.on_retried_enqueue(Conformance, _broken)
    job, events = run_attempt(scheduler, enqueue("raise"))
    assert job.state == "retryable"
    assert job.errors[-1]["type"] == BOOM  # the handler's own error, not the builder's
    assert names(events) == ["Started", "Retried"]
    assert follow_ups() == []


@pytest.mark.parametrize("built", [Next("x", "y"), "text", 42, [{"no": "kind"}]])
def test_a_builder_that_returns_no_jobs_fails_like_a_raising_one(
    scheduler: str, built: object
) -> None:
    awa_django.on_completed_enqueue(Conformance, lambda a, e: built)  # type: ignore[arg-type,return-value]
    job, _ = run_attempt(scheduler, enqueue("complete"))
    assert job.state == "retryable"
    assert job.errors[-1]["type"] == "awa_django.exceptions.FollowUpFailed"


def test_a_unique_follow_up_whose_key_is_held_is_skipped(scheduler: str) -> None:
    unique = awa_django.UniqueOpts(by_args=True)
    held = awa_django.enqueue(Next("held", "complete"), queue=FOLLOW, unique=unique)
    awa_django.on_completed_enqueue(
        Conformance,
        lambda a, e: [
            awa_django.follow_up(Next("held", a.mode), queue=FOLLOW, unique=unique),
            awa_django.follow_up(Next("new", a.mode), queue=FOLLOW, unique=unique),
        ],
    )
    job, _ = run_attempt(scheduler, enqueue("complete"))
    assert job.state == "completed"
    assert [a["outcome"] for _, a in follow_ups()] == ["held", "new"]
    assert Job.objects.filter(kind="next").order_by("id")[0].id == held.id


def test_an_atomic_completion_commits_its_follow_up_with_the_writes(scheduler: str) -> None:
    awa_django.on_completed_enqueue(Effect, lambda a, e: [Next("completed", a.mode)])
    run_attempt(scheduler, awa_django.enqueue(Effect("complete")).id)
    assert [a["outcome"] for _, a in follow_ups()] == ["completed"]


def test_an_atomic_completion_whose_builder_fails_rolls_the_writes_back(scheduler: str) -> None:
    from testproject.testjobs.models import Invoice

    awa_django.on_completed_enqueue(Effect, _broken)  # type: ignore[arg-type]
    job, _ = run_attempt(scheduler, awa_django.enqueue(Effect("complete")).id)
    assert job.state == "retryable"
    assert job.errors[-1]["type"] == "awa_django.exceptions.FollowUpFailed"
    assert not Invoice.objects.exists()
    assert follow_ups() == []
