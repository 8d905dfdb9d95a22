"""Every admin page at a laptop's width (1280x800) and a desktop's (1920x1080): nothing
scrolls sideways, neither the page nor a table inside it (Django's change list scrolls its
table in a box of its own), and the detail pages carry their action buttons. One
screenshot per page and width goes to $AWA_SCREENSHOT_DIR (issue 27, section 3)."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

import awa_django
from awa_django.storage.models import (
    ActiveLease,
    CronSchedule,
    Job,
    QueueRollup,
    WorkerInstance,
)
from testproject.testjobs.jobs import AccNoop
from tests.factories import DeadLetterFactory, JobFactory

from .test_dashboard_e2e import log_in, operator

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["operator"]  # the fixture, imported for this module's tests

WIDTHS = [(1280, 800), (1920, 1080)]

# The page's own horizontal scroll, and every element of the content that reaches past
# the viewport's right edge (an element inside a scrolling box reports where it would be
# drawn, so a table hidden behind a box's scrollbar counts too).
OVERFLOW = """
() => {
  const page = document.scrollingElement;
  const right = document.documentElement.clientWidth;
  const wide = [];
  for (const element of document.querySelectorAll("#content *")) {
    const box = element.getBoundingClientRect();
    if (box.width > 0 && box.right > right + 1) {
      wide.push(`${element.tagName.toLowerCase()}#${element.id}.${element.className} `
        + `right=${Math.round(box.right)}`);
    }
  }
  return {scrollWidth: page.scrollWidth, clientWidth: page.clientWidth, wide: wide.slice(0, 8)};
}
"""

# A traceback as the worker stores it: several frames, a long message.
TRACEBACK = "\n".join(
    [
        "shop.payments.CardDeclined: the card ending 4242 was declined by the issuer "
        "(insufficient funds; retry after the customer updates the payment method)",
        "Traceback (most recent call last):",
        *(
            f'  File "/srv/app/shop/payments/gateway_client_{n}.py", line {10 * n}, in charge\n'
            f"    response = self.session.post(self.endpoint, json=payload, timeout=30)"
            for n in range(1, 5)
        ),
        "shop.payments.CardDeclined: the card ending 4242 was declined by the issuer "
        "(insufficient funds; retry after the customer updates the payment method)",
    ]
)


def _jobs() -> dict[str, Any]:
    now = timezone.now()
    long_kind = "shop.tasks.reconcile_settlement_batch_with_acquirer"
    failed = JobFactory(
        queue="payments-eu",
        kind=long_kind,
        state="failed",
        attempt=3,
        max_attempts=3,
        attempted_at=now,
        finalized_at=now,
        tags=["billing", "eu"],
        errors=[
            {"error": TRACEBACK, "attempt": n, "at": now.isoformat(), "terminal": n == 3}
            for n in (1, 2, 3)
        ],
    )
    retryable = JobFactory(
        queue="email",
        state="retryable",
        attempt=1,
        run_at=now + dt.timedelta(minutes=5),
        errors=[{"error": TRACEBACK, "attempt": 1, "at": now.isoformat()}],
    )
    running = JobFactory(
        queue="email", state="running", attempt=1, run_lease=7, attempted_at=now,
        attempted_by=["w-layout"],
    )  # fmt: skip
    ActiveLease.objects.create(
        job_id=running.pk, run_lease=7, queue="email", worker_id="w-layout-" + "0" * 24
    )
    waiting = JobFactory(
        queue="default",
        state="waiting_external",
        attempt=1,
        callback_id=uuid.uuid4(),
        callback_timeout_at=now + dt.timedelta(hours=1),
    )
    for state in ("available", "scheduled", "completed", "cancelled"):
        JobFactory.create_batch(3, queue="bulk-imports", kind=long_kind, state=state)
    return {
        "failed": failed,
        "retryable": retryable,
        "running": running,
        "waiting_external": waiting,
    }


def _fixtures() -> dict[str, Any]:
    jobs = _jobs()
    now = timezone.now()
    letter = DeadLetterFactory(
        queue="payments-eu",
        kind="shop.tasks.reconcile_settlement_batch_with_acquirer",
        errors=[{"error": TRACEBACK, "attempt": 3, "at": now.isoformat(), "terminal": True}],
    )
    CronSchedule.objects.create(
        name="nightly-settlement-reconciliation",
        expression="0 2 * * *",
        timezone="Europe/Berlin",
        kind="shop.tasks.reconcile_settlement_batch_with_acquirer",
        last_job_id=jobs["failed"].pk,
        last_fire_at=now - dt.timedelta(hours=3),
    )
    CronSchedule.objects.create(
        name="hourly-digest", expression="0 * * * *", kind="send_digest", paused=True
    )
    WorkerInstance.objects.create(
        worker_id="w-layout-" + "0" * 24,
        hostname="worker-host-with-a-long-name.eu-central-1.compute.internal",
        pid=4321,
        queues={"default": 10, "email": 4, "payments-eu": 4, "bulk-imports": 2},
        leader=True,
    )
    minute = now.replace(second=0, microsecond=0)
    QueueRollup.objects.bulk_create(
        QueueRollup(queue=q, minute=minute - dt.timedelta(minutes=m), completed=m, failed=1)
        for q in ("default", "email", "payments-eu", "bulk-imports")
        for m in range(1, 30)
    )
    return {**jobs, "letter": letter, **_flows()}


def _flows() -> dict[str, Any]:
    """A chain, a group with its child (one member completed) and a batch of 60 with
    callbacks: the Workflow panel, the flow pages and the batch pages."""
    chained = awa_django.chain(AccNoop(1), AccNoop(2), AccNoop(3))
    group = awa_django.group(*(AccNoop(n) for n in range(4, 10))).then(AccNoop(10))
    Job.objects.filter(id=group.members[0].id).update(state="completed", attempt=1)
    batch = awa_django.batch(
        [AccNoop(n) for n in range(100, 160)], on_success=AccNoop(-1), on_complete=AccNoop(-2)
    )
    return {"chain": chained, "group": group, "batch": batch}


def _pages(made: dict[str, Any]) -> dict[str, str]:
    admin = "/admin/awa_django"
    pages = {
        "index": "/admin/",
        "app_index": f"{admin}/",
        "dashboard": f"{admin}/job/dashboard/",
        "dashboard_day": f"{admin}/job/dashboard/?range=day",
        "keys": f"{admin}/job/dashboard/keys/",
        "job_list": f"{admin}/job/",
        "job_list_failed": f"{admin}/job/?state__exact=failed",
        "dead_letter_list": f"{admin}/deadletter/",
        "dead_letter_detail": f"{admin}/deadletter/{made['letter'].pk}/change/",
        "cron_list": f"{admin}/cronschedule/",
        "cron_detail": f"{admin}/cronschedule/nightly-settlement-reconciliation/change/",
        "cron_detail_paused": f"{admin}/cronschedule/hourly-digest/change/",
    }
    for state in ("failed", "retryable", "running", "waiting_external"):
        pages[f"job_detail_{state}"] = f"{admin}/job/{made[state].pk}/change/"
    pages["job_detail_in_a_flow"] = f"{admin}/job/{made['group'].child.id}/change/"
    pages["job_flow_chain"] = f"{admin}/job/{made['chain'][1].id}/flow/"
    pages["job_flow_group"] = f"{admin}/job/{made['group'].child.id}/flow/"
    pages["batch_list"] = f"{admin}/batch/"
    pages["batch_detail"] = f"{admin}/batch/{made['batch']}/change/"
    pages["job_history"] = f"{admin}/job/{made['failed'].pk}/history/"
    pages["job_delete"] = f"{admin}/job/{made['failed'].pk}/delete/"
    return pages


def _overflow(page: Any, shots: Path, name: str) -> dict[str, Any] | None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    measured: dict[str, Any] = page.evaluate(OVERFLOW)
    too_wide = measured["scrollWidth"] > measured["clientWidth"] or measured["wide"]
    return measured if too_wide else None


def _posted_pages(page: Any, base: str, made: dict[str, Any]) -> dict[str, str]:
    """Pages reached by a POST, opened in the browser: {name: how to reach them}."""
    opened = {}
    page.goto(f"{base}/admin/awa_django/job/{made['waiting_external'].pk}/change/")
    page.fill("textarea[name=payload]", "{not json")
    page.click("#awa-act-complete_callbacks")
    page.wait_for_selector(".errorlist")
    opened["callback_form"] = "the Complete button with a payload that is not JSON"
    return opened


def test_no_admin_page_scrolls_sideways_at_laptop_or_desktop_width(
    live_server: Any, browser: Any, operator: str, screenshot_dir: Path
) -> None:
    made = _fixtures()
    pages = _pages(made)
    found: dict[str, Any] = {}
    for width, height in WIDTHS:
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.set_default_timeout(20_000)
        log_in(page, live_server.url, operator, "/admin/")
        # One screenshot per page at the laptop width; the desktop ones in a subfolder.
        shots = screenshot_dir if width == WIDTHS[0][0] else screenshot_dir / str(width)
        shots.mkdir(exist_ok=True)
        for name, url in pages.items():
            page.goto(live_server.url + url)
            page.wait_for_load_state("load")
            found[f"{name} at {width}"] = _overflow(page, shots, name)
        for name in _posted_pages(page, live_server.url, made):
            found[f"{name} at {width}"] = _overflow(page, shots, name)
        context.close()
    found = {where: measured for where, measured in found.items() if measured}
    assert not found, "\n".join(f"{k}: {v}" for k, v in found.items())


def test_detail_pages_carry_the_buttons_of_their_state(
    live_server: Any, page: Any, operator: str
) -> None:
    from playwright.sync_api import expect

    made = _fixtures()
    pages = _pages(made)
    log_in(page, live_server.url, operator, "/admin/")
    expected = {
        "job_detail_failed": ["Retry"],
        "job_detail_retryable": ["Retry", "Cancel"],
        "job_detail_running": ["Cancel"],
        "job_detail_waiting_external": ["Complete", "Fail", "Retry", "Cancel"],
        "dead_letter_detail": ["Retry", "Purge"],
        "cron_detail": ["Pause", "Trigger now"],
        "cron_detail_paused": ["Resume", "Trigger now"],
    }
    for name, labels in expected.items():
        page.goto(live_server.url + pages[name])
        expect(page.locator("#awa-object-actions button")).to_have_text(labels)


def test_operator_retries_a_failed_job_and_completes_a_callback_from_their_pages(
    live_server: Any, page: Any, operator: str, screenshot_dir: Path
) -> None:
    from playwright.sync_api import expect

    page.set_viewport_size({"width": 1280, "height": 800})
    failed = JobFactory(
        state="failed",
        attempt=3,
        max_attempts=3,
        finalized_at=timezone.now(),
        errors=[{"error": TRACEBACK, "attempt": 3, "at": timezone.now().isoformat()}],
    )
    waiting = JobFactory(state="waiting_external", attempt=1, callback_id=uuid.uuid4())
    job_page = f"/admin/awa_django/job/{failed.pk}/change/"
    log_in(page, live_server.url, operator, job_page)
    expect(page.locator("details.awa-error-entry[open] pre.awa-error")).to_contain_text(
        "response = self.session.post("
    )
    page.click("#awa-act-retry_jobs")
    page.wait_for_url(f"**{job_page}")
    expect(page.locator(".messagelist")).to_contain_text("1 job retried")
    expect(page.locator(".field-state_badge .awa-badge")).to_have_text("available")
    page.screenshot(path=str(screenshot_dir / "job_detail_after_retry.png"), full_page=True)
    assert Job.objects.get(pk=failed.pk).state == "available"

    page.goto(f"{live_server.url}/admin/awa_django/job/{waiting.pk}/change/")
    page.fill("textarea[name=payload]", "{not json")
    page.click("#awa-act-complete_callbacks")
    expect(page.locator(".errorlist")).to_contain_text("Enter a valid JSON.")
    assert Job.objects.get(pk=waiting.pk).state == "waiting_external"
    page.fill("textarea[name=payload]", '{"ok": true}')
    page.click("input[type=submit][value='Complete callbacks']")
    expect(page.locator(".messagelist")).to_contain_text("1 callback completed")
    expect(page.locator(".field-state_badge .awa-badge")).to_have_text("completed")
