"""The buttons of the detail pages (admin/object_actions.py): each runs the change list's
own action on one object, with the same permission, the same CSRF check, the same Client
verb and the same message; and what the detail pages show instead of raw numbers (the
lease, the traceback, a schedule's status and fires). Issue 27, section 3."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client as HttpClient
from django.urls import reverse
from django.utils import timezone

from awa_django.storage.models import ActiveLease, CronSchedule, DeadLetter, Job
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(django_user_model):
    """Log in a staff user who may view jobs, dead letters and schedules, plus `codenames`."""

    def login(client: HttpClient, *codenames: str) -> Any:
        user = django_user_model.objects.create_user(
            f"op-{uuid.uuid4().hex[:8]}", password="pw", is_staff=True
        )
        wanted = {"view_job", "view_deadletter", "view_cronschedule", *codenames}
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="awa_django", codename__in=wanted)
        )
        client.force_login(user)
        return user

    return login


def act_url(model: str, pk: Any, action: str) -> str:
    return reverse(f"admin:awa_django_{model}_act", args=[pk, action])


def detail(client: HttpClient, model: str, pk: Any) -> str:
    page = client.get(reverse(f"admin:awa_django_{model}_change", args=[pk]))
    assert page.status_code == 200
    return str(page.content.decode())


def press(client: HttpClient, model: str, pk: Any, action: str, **data: Any) -> Any:
    return client.post(act_url(model, pk, action), {"action": action, **data}, follow=True)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def state(job: Job) -> str:
    return str(Job.objects.get(pk=job.pk).state)


def parked() -> Job:
    return JobFactory(state="waiting_external", callback_id=uuid.uuid4(), attempt=1)


# -- jobs --------------------------------------------------------------------------------
def test_retry_on_a_failed_job_retries_it_and_says_so(client, operator):
    operator(client, "retry_job", "cancel_job")
    job = JobFactory(state="failed", attempt=3, finalized_at=timezone.now())
    page = detail(client, "job", job.pk)
    assert f'action="{act_url("job", job.pk, "retry_jobs")}"' in page
    assert 'id="awa-act-cancel_jobs"' not in page  # a failed job cannot be cancelled

    response = press(client, "job", job.pk, "retry_jobs")

    assert response.redirect_chain[-1][0] == reverse("admin:awa_django_job_change", args=[job.pk])
    assert messages_of(response) == ["1 job retried"]
    assert (state(job), Job.objects.get(pk=job.pk).attempt) == ("available", 0)


def test_retry_on_a_retryable_job_runs_it_now(client, operator):
    operator(client, "retry_job", "cancel_job")
    job = JobFactory(state="retryable", attempt=2, run_at=timezone.now() + dt.timedelta(hours=1))
    page = detail(client, "job", job.pk)
    assert 'id="awa-act-retry_jobs"' in page and 'id="awa-act-cancel_jobs"' in page
    response = press(client, "job", job.pk, "retry_jobs")
    assert messages_of(response) == ["1 job retried"]
    row = Job.objects.get(pk=job.pk)
    assert (row.state, row.attempt) == ("available", 0) and row.run_at <= timezone.now()


def test_cancel_on_a_retryable_job_cancels_it(client, operator):
    operator(client, "cancel_job")
    job = JobFactory(state="retryable", attempt=1)
    assert 'id="awa-act-cancel_jobs"' in detail(client, "job", job.pk)
    response = press(client, "job", job.pk, "cancel_jobs")
    assert messages_of(response) == ["1 job cancelled"]
    assert state(job) == "cancelled"


def test_a_button_without_its_permission_is_not_shown_and_refused(client, operator):
    operator(client, "cancel_job")
    job = JobFactory(state="failed", finalized_at=timezone.now())
    assert "awa-act-retry_jobs" not in detail(client, "job", job.pk)
    response = client.post(act_url("job", job.pk, "retry_jobs"), {"action": "retry_jobs"})
    assert response.status_code == 403
    assert state(job) == "failed"


def test_buttons_enforce_csrf_and_post(operator):
    csrf_client = HttpClient(enforce_csrf_checks=True)
    operator(csrf_client, "retry_job")
    job = JobFactory(state="failed", finalized_at=timezone.now())
    assert csrf_client.post(act_url("job", job.pk, "retry_jobs")).status_code == 403
    assert csrf_client.get(act_url("job", job.pk, "retry_jobs")).status_code == 405
    assert state(job) == "failed"


def test_an_unknown_action_or_job_is_refused_without_a_traceback(client, operator):
    operator(client, "retry_job")
    job = JobFactory(state="failed", finalized_at=timezone.now())
    assert client.post(act_url("job", job.pk, "delete_selected")).status_code == 403
    assert client.post(act_url("job", 10**12, "retry_jobs")).status_code == 404
    assert client.post(act_url("job", "x'; --", "retry_jobs")).status_code == 404


def test_complete_on_a_parked_job_validates_the_payload_then_completes(client, operator):
    operator(client, "complete_callback", "fail_callback", "retry_callback", "cancel_job")
    job = parked()
    page = detail(client, "job", job.pk)
    for button in ("complete_callbacks", "fail_callbacks", "retry_callbacks", "cancel_jobs"):
        assert f'id="awa-act-{button}"' in page
    assert 'name="payload"' in page and 'name="error"' in page

    bad = press(client, "job", job.pk, "complete_callbacks", apply=1, payload="{not json")
    assert bad.status_code == 200 and "Enter a valid JSON." in bad.content.decode()
    assert state(job) == "waiting_external"

    done = press(client, "job", job.pk, "complete_callbacks", apply=1, payload='{"ok": 1}')
    assert messages_of(done) == ["1 callback completed"]
    assert state(job) == "completed"


def test_fail_and_retry_on_a_parked_job(client, operator):
    operator(client, "fail_callback", "retry_callback")
    failing, retrying = parked(), parked()

    empty = press(client, "job", failing.pk, "fail_callbacks", apply=1, error=" ")
    assert "This field is required." in empty.content.decode()
    failed = press(client, "job", failing.pk, "fail_callbacks", apply=1, error="partner said no")
    assert messages_of(failed) == ["1 callback failed"]
    assert Job.objects.get(pk=failing.pk).errors[-1]["error"] == "partner said no"

    retried = press(client, "job", retrying.pk, "retry_callbacks")
    assert messages_of(retried) == ["1 callback retried"]
    assert state(retrying) == "available"


def test_the_lease_is_told_in_words_not_as_the_run_lease_number(client, operator):
    operator(client)
    job = JobFactory(state="running", attempt=2, run_lease=987654, attempted_at=timezone.now())
    ActiveLease.objects.create(
        job_id=job.pk, run_lease=987654, queue="default", worker_id="worker-xyz"
    )
    page = detail(client, "job", job.pk)
    assert "Attempt 2's lease, held by worker <code>worker-xyz</code>" in page
    assert "987654" not in page and "Run lease" not in page


def test_each_attempts_traceback_is_whole_and_collapsible(client, operator):
    operator(client)
    # As Python 3.11+ prints it, and as earlier versions stored it: marker lines included.
    trace = (
        "KeyError: 'b'\nTraceback (most recent call last):\n"
        '  File "/srv/app/jobs.py", line 3, in charge\n'
        '    return order["a"]["b"] + 1\n'
        "           ~~~~~~~~~~^^^^^\n"
        "KeyError: 'b'"
    )
    now = timezone.now().isoformat()
    job = JobFactory(
        state="failed",
        finalized_at=timezone.now(),
        errors=[
            {"error": "first <bad>", "attempt": 1, "at": now},
            {"error": trace, "attempt": 2, "at": now, "terminal": True},
        ],
    )
    page = detail(client, "job", job.pk)
    assert page.count('<details class="awa-error-entry"') == 2
    assert page.count('<details class="awa-error-entry" open>') == 1  # the latest
    assert "first &lt;bad&gt;" in page
    assert "return order[&quot;a&quot;][&quot;b&quot;] + 1" in page  # the raising line
    assert "~~~" not in page and "^^^" not in page


# -- dead letters -------------------------------------------------------------------------
def test_retry_on_a_dead_letter_puts_the_job_back_and_opens_it(client, operator):
    operator(client, "retry_dead_letter", "purge_dead_letter")
    letter = DeadLetterFactory(queue="payments")
    page = detail(client, "deadletter", letter.pk)
    assert 'id="awa-act-retry_dead_letters"' in page and 'id="awa-act-purge_dead_letters"' in page
    response = press(client, "deadletter", letter.pk, "retry_dead_letters")
    assert messages_of(response) == ["1 dead letter retried"]
    assert response.redirect_chain[-1][0] == reverse(
        "admin:awa_django_job_change", args=[letter.pk]
    )
    assert Job.objects.get(pk=letter.pk).state == "available"


def test_purge_on_a_dead_letter_removes_it_and_returns_to_the_list(client, operator):
    operator(client, "purge_dead_letter")
    letter = DeadLetterFactory()
    assert "awa-act-retry_dead_letters" not in detail(client, "deadletter", letter.pk)
    response = press(client, "deadletter", letter.pk, "purge_dead_letters")
    assert messages_of(response) == ["1 dead letter purged"]
    assert response.redirect_chain[-1][0] == reverse("admin:awa_django_deadletter_changelist")
    assert not DeadLetter.objects.filter(pk=letter.pk).exists()


def test_dead_letter_buttons_need_their_permission(client, operator):
    operator(client)
    letter = DeadLetterFactory()
    assert 'id="awa-object-actions"' not in detail(client, "deadletter", letter.pk)
    for action in ("retry_dead_letters", "purge_dead_letters"):
        assert client.post(act_url("deadletter", letter.pk, action)).status_code == 403
    assert DeadLetter.objects.filter(pk=letter.pk).exists()


# -- cron schedules -----------------------------------------------------------------------
def schedule(**fields: Any) -> CronSchedule:
    defaults: dict[str, Any] = {
        "name": "nightly",
        "expression": "0 2 * * *",
        "timezone": "Europe/Berlin",
        "kind": "report",
    }
    return CronSchedule.objects.create(**{**defaults, **fields})


def test_schedule_detail_says_active_lists_next_fires_in_its_zone_and_links_the_last_job(
    client, operator
):
    operator(client)
    job = JobFactory(kind="report")
    row = schedule(last_job_id=job.pk, last_fire_at=timezone.now() - dt.timedelta(hours=1))
    page = detail(client, "cronschedule", row.pk)
    assert ">Active</span>" in page
    fires = page.split('id="awa-next-fires"')[1].split("</ol>")[0]
    assert fires.count("<li>") == 5 and fires.count("(Europe/Berlin)") == 5
    assert " 02:00 CE" in fires  # 02:00 Berlin time, CET or CEST
    assert reverse("admin:awa_django_job_change", args=[job.pk]) in page

    listing = client.get(reverse("admin:awa_django_cronschedule_changelist")).content.decode()
    assert ">Active</span>" in listing and "(Europe/Berlin)" in listing


def test_pause_resume_and_trigger_buttons_on_a_schedule(client, operator):
    operator(client, "manage_schedule")
    row = schedule()
    assert 'id="awa-act-pause_schedules"' in detail(client, "cronschedule", row.pk)
    paused = press(client, "cronschedule", row.pk, "pause_schedules")
    assert messages_of(paused) == ["1 schedule paused"]
    page = paused.content.decode()
    assert ">Paused</span>" in page and 'id="awa-act-resume_schedules"' in page

    resumed = press(client, "cronschedule", row.pk, "resume_schedules")
    assert messages_of(resumed) == ["1 schedule resumed"]
    assert not CronSchedule.objects.get(pk=row.pk).paused

    triggered = press(client, "cronschedule", row.pk, "trigger_schedules")
    assert messages_of(triggered) == ["1 schedule triggered"]
    assert Job.objects.filter(kind="report").count() == 1


def test_schedule_buttons_need_manage_schedule(client, operator):
    operator(client)
    row = schedule()
    assert 'id="awa-object-actions"' not in detail(client, "cronschedule", row.pk)
    assert client.post(act_url("cronschedule", row.pk, "pause_schedules")).status_code == 403
    assert not CronSchedule.objects.get(pk=row.pk).paused


# -- the index --------------------------------------------------------------------------------
def test_the_admin_index_links_to_the_dashboard(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert f'href="{reverse("admin:awa_django_dashboard")}"' in page


def test_the_payload_box_starts_empty(client, operator):
    operator(client, "complete_callback")
    page = detail(client, "job", parked().pk)
    box = page.split('name="payload"')[1].split("</textarea>")[0]
    assert box.endswith(">\n") or box.endswith(">"), box
