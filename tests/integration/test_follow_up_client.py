"""Follow-up jobs of the Client's transitions (decision 015): every callback resolution
(the verbs, the signed HTTP views, the admin actions), cancels, and the leader's rescue.
Each inserts its follow-ups in the transition's transaction; a transition that does not
happen inserts none; a builder that fails leaves the job as it was."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from django.test import Client as HttpClient
from django.urls import reverse
from django.utils import timezone

import awa_django
from awa_django.events import Event
from awa_django.exceptions import CallbackNotFound, FollowUpFailed
from awa_django.storage.models import ActiveLease, Job
from awa_django.web.signing import sign_callback_request
from awa_django.worker.maintenance.rescuer import Rescuer
from testproject.shop.jobs import SendReceipt
from tests.factories import JobFactory
from tests.integration.test_callbacks import ParkedJobFactory, callback_of, running_with_callback
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db

FOLLOW = "follow"
SECRET = "follow-up-test-secret-0123456789ab"


@dataclass
class Notify:
    """The follow-up job: which outcome of which order built it, and a detail."""

    outcome: str
    order_id: int
    detail: str = ""


def _notify(outcome: str, detail: Callable[[Any], str] = lambda event: "") -> Any:
    """A builder of one Notify follow-up, with `detail(event)` (the outcome's details)."""

    def build(args: SendReceipt, event: Event[SendReceipt]) -> list[awa_django.FollowUp]:
        notify = Notify(outcome, args.order_id, detail(event))
        return [awa_django.follow_up(notify, queue=FOLLOW)]

    return build


@pytest.fixture
def builders(clean_hooks: Any) -> None:
    awa_django.on_completed_enqueue(SendReceipt, _notify("completed"))
    awa_django.on_exhausted_enqueue(SendReceipt, _notify("exhausted", lambda e: e.error))
    awa_django.on_retried_enqueue(SendReceipt, _notify("retried", lambda e: str(e.attempt)))
    awa_django.on_cancelled_enqueue(SendReceipt, _notify("cancelled", lambda e: e.reason))
    awa_django.on_rescued_enqueue(SendReceipt, _notify("rescued", lambda e: e.reason))


def _broken(args: SendReceipt, event: Any) -> list[Any]:
    raise RuntimeError("template missing")


def notified() -> list[tuple[str, int, str]]:
    rows = (
        Job.objects.filter(kind="notify", queue=FOLLOW)
        .order_by("id")
        .values_list("args", flat=True)
    )
    return [(a["outcome"], a["order_id"], a["detail"]) for a in rows]


def parked(order_id: int = 7, **fields: Any) -> Job:
    return ParkedJobFactory(args={"order_id": order_id}, **fields)


# -- the Client's callback verbs ---------------------------------------------------------
@pytest.mark.usefixtures("builders")
def test_complete_external_commits_its_follow_up() -> None:
    job = parked()
    awa_django.Client().complete_external(callback_of(job))
    assert notified() == [("completed", 7, "")]


@pytest.mark.usefixtures("builders")
def test_fail_external_commits_its_follow_up_with_the_error() -> None:
    job = parked(8)
    awa_django.Client().fail_external(callback_of(job), "declined by the bank")
    assert notified() == [("exhausted", 8, "declined by the bank")]


@pytest.mark.usefixtures("builders")
def test_retry_external_commits_its_follow_up_with_the_parked_attempt() -> None:
    job = parked(9, attempt=2, run_lease=2)
    awa_django.Client().retry_external(callback_of(job))
    assert notified() == [("retried", 9, "2")]


@pytest.mark.usefixtures("builders")
@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("complete", [("completed", 7, "")]),
        ("fail", [("exhausted", 7, "callback failed: default action")]),
        ("ignore", []),
    ],
)
def test_resolve_callback_commits_the_follow_ups_of_its_action(action: str, expected: Any) -> None:
    job = parked()
    awa_django.Client().resolve_callback(callback_of(job), default_action=action)  # type: ignore[arg-type]
    assert notified() == expected


@pytest.mark.usefixtures("builders")
def test_a_running_attempt_completed_early_commits_its_follow_up() -> None:
    job = running_with_callback(args={"order_id": 3})
    awa_django.Client().complete_external(callback_of(job), run_lease=job.run_lease)
    assert notified() == [("completed", 3, "")]


@pytest.mark.usefixtures("builders")
def test_a_resolution_that_matches_nothing_inserts_nothing() -> None:
    job = parked(state="completed")
    with pytest.raises(CallbackNotFound):
        awa_django.Client().complete_external(callback_of(job))
    with pytest.raises(CallbackNotFound):
        awa_django.Client().complete_external(callback_of(parked()), run_lease=99)
    assert notified() == []


def test_a_failing_builder_leaves_the_callback_pending(clean_hooks: Any) -> None:
    awa_django.on_completed_enqueue(SendReceipt, _broken)
    job = parked()
    with pytest.raises(FollowUpFailed, match=r"_broken.*template missing"):
        awa_django.Client().complete_external(callback_of(job))
    assert Job.objects.get(id=job.id).state == "waiting_external"
    awa_django.Client().fail_external(callback_of(job), "gave up")  # other verbs still work
    assert Job.objects.get(id=job.id).state == "failed"


def test_a_failing_builder_leaves_the_callers_transaction_usable(clean_hooks: Any) -> None:
    awa_django.on_completed_enqueue(SendReceipt, _broken)
    job = parked()
    with transaction.atomic():
        with pytest.raises(FollowUpFailed):
            awa_django.Client().complete_external(callback_of(job))
        assert Job.objects.get(id=job.id).state == "waiting_external"


# -- cancels ------------------------------------------------------------------------------
@pytest.mark.usefixtures("builders")
def test_cancel_and_cancel_many_commit_a_follow_up_per_cancelled_job() -> None:
    one, two, done = (
        JobFactory(args={"order_id": 1}),
        JobFactory(args={"order_id": 2}),
        JobFactory(args={"order_id": 3}, state="completed"),
    )
    awa_django.Client().cancel(one.id)
    awa_django.Client().cancel_many([two.id, done.id])
    assert notified() == [
        ("cancelled", 1, "cancelled by operator"),
        ("cancelled", 2, "cancelled by operator"),
    ]


@pytest.mark.usefixtures("builders")
def test_cancel_by_unique_key_commits_its_follow_up() -> None:
    unique = awa_django.UniqueOpts(by_args=True)
    job = awa_django.enqueue(SendReceipt(order_id=5), unique=unique)
    awa_django.Client().cancel_by_unique_key(SendReceipt, args=SendReceipt(order_id=5))
    assert Job.objects.get(id=job.id).state == "cancelled"
    assert notified() == [("cancelled", 5, "cancelled by operator")]


def test_a_failing_cancel_builder_cancels_nothing(clean_hooks: Any) -> None:
    awa_django.on_cancelled_enqueue(SendReceipt, _broken)
    job = JobFactory(args={"order_id": 1})
    with pytest.raises(FollowUpFailed):
        awa_django.Client().cancel(job.id)
    assert Job.objects.get(id=job.id).state == "available"


# -- the signed HTTP views and the admin actions (both through the Client) ----------------
def _post(callback_id: Any, action: str, body: dict[str, Any]) -> Any:
    raw = json.dumps(body).encode()
    path = f"/awa/callbacks/{callback_id}/{action}"
    headers = sign_callback_request("POST", path, raw, secret=SECRET, timestamp=int(time.time()))
    return HttpClient().generic("POST", path, raw, content_type="application/json", headers=headers)


@pytest.mark.usefixtures("builders")
def test_the_http_views_commit_follow_ups(settings: Any) -> None:
    settings.AWA = {**settings.AWA, "CALLBACK_SECRET": SECRET}
    completed, failed = parked(1), parked(2)
    assert _post(completed.callback_id, "complete", {}).status_code == 200
    assert _post(failed.callback_id, "fail", {"error": "no stock"}).status_code == 200
    assert notified() == [("completed", 1, ""), ("exhausted", 2, "no stock")]


def test_an_http_resolution_whose_builder_fails_is_a_500_and_changes_nothing(
    settings: Any, clean_hooks: Any
) -> None:
    settings.AWA = {**settings.AWA, "CALLBACK_SECRET": SECRET}
    awa_django.on_completed_enqueue(SendReceipt, _broken)
    job = parked()
    response = _post(job.callback_id, "complete", {})
    assert response.status_code == 500
    assert "template missing" not in response.content.decode()  # not for outside eyes
    assert Job.objects.get(id=job.id).state == "waiting_external"


@pytest.mark.usefixtures("builders")
def test_the_admin_actions_commit_follow_ups(admin_client: HttpClient) -> None:
    completed, live = parked(1), JobFactory(args={"order_id": 2})
    changelist = reverse("admin:awa_django_job_changelist")
    admin_client.post(
        changelist,
        {
            "action": "complete_callbacks",
            "_selected_action": [completed.pk],
            "index": 0,
            "apply": 1,
            "payload": "{}",
        },
    )
    admin_client.post(
        changelist, {"action": "cancel_jobs", "_selected_action": [live.pk], "index": 0}
    )
    assert notified() == [("completed", 1, ""), ("cancelled", 2, "cancelled by operator")]


def test_an_admin_action_whose_builder_fails_reports_it(
    admin_client: HttpClient, clean_hooks: Any
) -> None:
    awa_django.on_cancelled_enqueue(SendReceipt, _broken)
    job = JobFactory(args={"order_id": 1})
    changelist = reverse("admin:awa_django_job_changelist")
    response = admin_client.post(
        changelist, {"action": "cancel_jobs", "_selected_action": [job.pk], "index": 0}, follow=True
    )
    assert any("template missing" in str(m) for m in response.context["messages"])
    assert Job.objects.get(id=job.id).state == "available"


# -- rescue: best-effort, after the rescue committed ----------------------------------------
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("builders")
def test_a_rescue_enqueues_its_follow_ups_after_it_commits() -> None:
    ago = timezone.now() - dt.timedelta(hours=1)
    parked(4, attempt=3, max_attempts=3, callback_timeout_at=ago)
    stale = JobFactory(args={"order_id": 5}, state="running", attempt=1, run_lease=1)
    ActiveLease.objects.create(
        job_id=stale.id, run_lease=1, queue=stale.queue, worker_id="w", heartbeat_at=ago
    )

    with_db(lambda db: Rescuer(db, staleness=90, emit=lambda event: None).run_once())
    # A rescue that ends the job is one Exhausted transition: its Rescued builders do not
    # run (decision 035); the retrying rescue's do.
    assert sorted(notified()) == [
        ("exhausted", 4, "callback timed out"),
        ("rescued", 5, "stale_heartbeat"),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_rescue_whose_builder_fails_is_still_committed(clean_hooks: Any) -> None:
    awa_django.on_rescued_enqueue(SendReceipt, _broken)
    ago = timezone.now() - dt.timedelta(hours=1)
    job = parked(4, callback_timeout_at=ago)

    with_db(lambda db: Rescuer(db, staleness=90, emit=lambda event: None).run_once())
    assert Job.objects.get(id=job.id).state == "retryable"
    assert notified() == []
