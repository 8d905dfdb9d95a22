"""End to end in a real browser: log in through the admin form, read the dashboard, pause
a queue, retry a failed job from the job list, and pause a cron schedule."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.utils import timezone

from awa_django.storage.models import CronSchedule, Job, QueueState, WorkerInstance
from tests.factories import JobFactory

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
