"""End to end in a real browser: log in through the admin form, read the dashboard, pause
a queue, retry a failed job from the job list, pause a cron schedule, and retry a dead
letter from the dead-letter list."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.utils import timezone

from awa_django.storage.models import CronSchedule, DeadLetter, Job, QueueState, WorkerInstance
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"


@pytest.fixture
def operator(django_user_model: Any) -> str:
    name = f"boss-{uuid.uuid4().hex[:6]}"
    django_user_model.objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    return name


def log_in(page: Any, base_url: str, username: str, next_path: str) -> None:
    page.goto(f"{base_url}/admin/login/?next={next_path}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_path}")


def test_operator_reads_the_dashboard_and_retries_a_failed_job(
    live_server: Any, page: Any, operator: str, screenshot_dir: Any
) -> None:
    from playwright.sync_api import expect

    failed = JobFactory(
        queue="email",
        kind="charge_card",
        state="failed",
        attempt=2,
        max_attempts=2,
        finalized_at=timezone.now(),
        errors=[{"error": "card <declined>", "attempt": 2, "at": timezone.now().isoformat()}],
    )
    JobFactory.create_batch(3, queue="email", state="available")
    WorkerInstance.objects.create(
        worker_id="w-e2e", hostname="worker-host-1", pid=4321, queues={"email": 4}, leader=True
    )

    log_in(page, live_server.url, operator, "/admin/awa_django/job/dashboard/")

    email = page.locator("tr.awa-queue[data-queue=email]")
    expect(email.locator("a.awa-state-available")).to_have_text("3")
    expect(email.locator("a.awa-state-failed")).to_have_text("1")
    expect(page.locator("#awa-workers")).to_contain_text("worker-host-1")
    page.screenshot(path=str(screenshot_dir / "dashboard.png"), full_page=True)

    email.locator("button.awa-pause").click()
    expect(page.locator(".messagelist")).to_contain_text("Queue email paused")
    expect(email.locator(".awa-badge.awa-paused")).to_be_visible()
    assert QueueState.objects.get(queue="email").paused

    page.click("text=All jobs")
    page.wait_for_url("**/admin/awa_django/job/")  # the list, not the dashboard being left
    expect(page.locator("#result_list")).to_contain_text("card <declined>", timeout=20_000)
    page.check(f'input[name="_selected_action"][value="{failed.pk}"]')
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")

    expect(page.locator(".messagelist")).to_contain_text("1 job retried")
    page.screenshot(path=str(screenshot_dir / "job_list.png"), full_page=True)
    row = Job.objects.get(pk=failed.pk)
    assert (row.state, row.attempt) == ("available", 0)

    page.click(f'#result_list a[href$="/{failed.pk}/change/"] >> nth=0')
    expect(page.locator("pre.awa-error")).to_have_text("card <declined>")
    expect(page.locator(".awa-timeline")).to_contain_text("attempt 2 error: card <declined>")
    page.screenshot(path=str(screenshot_dir / "job_detail.png"), full_page=True)


def test_operator_opens_the_schedules_from_the_dashboard_and_pauses_one(
    live_server: Any, page: Any, operator: str, screenshot_dir: Any
) -> None:
    from playwright.sync_api import expect

    CronSchedule.objects.create(
        name="nightly-report", expression="0 2 * * *", timezone="Europe/Berlin", kind="report"
    )
    log_in(page, live_server.url, operator, "/admin/awa_django/job/dashboard/")
    page.click("#awa-schedules-link")
    expect(page.locator("#result_list")).to_contain_text("nightly-report")
    expect(page.locator("#result_list")).to_contain_text("Europe/Berlin")
    page.check('input[name="_selected_action"][value="nightly-report"]')
    page.select_option("select[name=action]", "pause_schedules")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("1 schedule paused")
    page.screenshot(path=str(screenshot_dir / "schedules.png"), full_page=True)
    assert CronSchedule.objects.get().paused


def test_operator_opens_the_dead_letters_from_the_dashboard_and_retries_one(
    live_server: Any, page: Any, operator: str, screenshot_dir: Any
) -> None:
    from playwright.sync_api import expect

    letter = DeadLetterFactory(
        queue="payments",
        kind="charge_card",
        reason="terminal_error",
        errors=[{"error": "card <declined>", "attempt": 3, "at": timezone.now().isoformat()}],
    )
    DeadLetterFactory(queue="payments", kind="refund")
    log_in(page, live_server.url, operator, "/admin/awa_django/job/dashboard/")
    expect(page.locator("#awa-dead-letters tr[data-queue=payments]")).to_contain_text("2")
    page.click("#awa-dead-letters tr[data-queue=payments] a")
    expect(page.locator("#result_list")).to_contain_text("card <declined>")
    expect(page.locator("#result_list")).to_contain_text("terminal_error")
    page.screenshot(path=str(screenshot_dir / "dead_letters.png"), full_page=True)

    page.check(f'input[name="_selected_action"][value="{letter.pk}"]')
    page.select_option("select[name=action]", "retry_dead_letters")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("1 dead letter retried")
    job = Job.objects.get(pk=letter.pk)
    assert (job.state, job.attempt, job.queue) == ("available", 0, "payments")
    assert not DeadLetter.objects.filter(pk=letter.pk).exists()


def test_operator_retries_all_failed_jobs_matching_the_filter_after_confirming(
    live_server: Any, page: Any, operator: str, screenshot_dir: Any
) -> None:
    """More failed jobs than one page shows: "Select all", Retry, a confirmation page with
    the count of the whole filter, then the chunked bulk operation (decision 018)."""
    from playwright.sync_api import expect

    JobFactory.create_batch(55, queue="bulk-e2e", state="failed", finalized_at=timezone.now())
    untouched = JobFactory(queue="elsewhere", state="failed", finalized_at=timezone.now())

    log_in(page, live_server.url, operator, "/admin/awa_django/job/?queue=bulk-e2e")
    page.check("#action-toggle")
    page.click(".actions .question a")  # "Select all 55 jobs"
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")

    expect(page.locator(".awa-bulk-count")).to_contain_text("Retry all 55 jobs")
    page.screenshot(path=str(screenshot_dir / "bulk_confirm.png"), full_page=True)
    assert Job.objects.filter(queue="bulk-e2e", state="failed").count() == 55
    page.click("text=Yes, retry 55 jobs")

    expect(page.locator(".messagelist")).to_contain_text("55 jobs retried (bulk operation")
    assert Job.objects.filter(queue="bulk-e2e", state="available").count() == 55
    assert Job.objects.get(pk=untouched.pk).state == "failed"
