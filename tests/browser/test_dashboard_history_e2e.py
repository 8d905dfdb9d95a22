"""The dashboard's history in a real browser: the charts render with data (checked on a
screenshot of the chart: the queue's series colour is there in its pixels), the per-kind
table shows, the fragment refreshes in place without a page reload, and the job list
shows its state summary bar (decision 021)."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest
from django.db import connection

from awa_django.admin import charts
from awa_django.storage.models import QueueRollup
from tests.factories import JobFactory

from .test_dashboard_e2e import log_in, operator

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["operator"]  # the fixture, imported for this module's tests

# Counts the pixels of a PNG (a data URL) within `tolerance` of an RGB colour, in the page.
COUNT_PIXELS = """
async ([url, rgb, tolerance]) => {
  const image = new Image();
  image.src = url;
  await image.decode();
  const canvas = document.createElement("canvas");
  canvas.width = image.width;
  canvas.height = image.height;
  const context = canvas.getContext("2d");
  context.drawImage(image, 0, 0);
  const data = context.getImageData(0, 0, image.width, image.height).data;
  let matching = 0, distinct = new Set();
  for (let i = 0; i < data.length; i += 4) {
    const [r, g, b] = [data[i], data[i + 1], data[i + 2]];
    distinct.add((r << 16) | (g << 8) | b);
    if (Math.abs(r - rgb[0]) <= tolerance && Math.abs(g - rgb[1]) <= tolerance
        && Math.abs(b - rgb[2]) <= tolerance) { matching++; }
  }
  return {matching, distinct: distinct.size, pixels: data.length / 4};
}
"""


def rgb(colour: str) -> list[int]:
    return [int(colour[i : i + 2], 16) for i in (1, 3, 5)]


def pixels_of(page: Any, png: bytes, colour: str) -> dict[str, int]:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    result: dict[str, int] = page.evaluate(COUNT_PIXELS, [url, rgb(colour), 40])
    return result


def minute(offset: int) -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('minute', now()) + make_interval(mins => %s)", [offset])
        return cursor.fetchone()[0]


def test_the_dashboard_draws_history_charts_that_refresh_in_place(
    live_server: Any, page: Any, operator: str, screenshot_dir: Any
) -> None:
    from playwright.sync_api import expect

    for offset in range(-40, 0):
        QueueRollup.objects.create(
            queue="email",
            minute=minute(offset),
            completed=20 + (offset % 7) * 5,
            failed=offset % 3,
            lag_seconds=float(-offset % 11),
        )
    JobFactory.create_batch(3, queue="email", kind="send_receipt", state="available")
    log_in(page, live_server.url, operator, "/admin/awa_django/job/dashboard/")

    chart = page.locator("#awa-chart-throughput")
    expect(chart.locator("polyline.awa-series[data-series=email]")).to_have_count(1)
    expect(page.locator(".awa-legend")).to_contain_text("email")
    png = chart.screenshot(path=str(screenshot_dir / "throughput_chart.png"))
    colour = charts.colours(["email"])["email"]
    seen = pixels_of(page, png, colour)
    # Not blank: the series is drawn in its colour across the chart.
    assert seen["matching"] > 200, seen
    assert seen["distinct"] > 3, seen
    assert pixels_of(page, png, "#ff00ff")["matching"] == 0  # a colour nothing draws

    # The fragment refreshes without a page reload: a marker set on the window survives
    # and the new rollup's kind appears in the table.
    page.evaluate("window.awaMarker = 'same page'")
    JobFactory(
        queue="email",
        kind="charge_card",
        state="failed",
        attempted_at=minute(0),
        finalized_at=minute(0),
    )
    expect(page.locator("#awa-kinds tr[data-kind=charge_card]")).to_have_count(1, timeout=20_000)
    assert page.evaluate("window.awaMarker") == "same page"
    expect(page.locator("#awa-kinds tr[data-kind=charge_card] .awa-failure-rate")).to_have_text(
        "100.0%"
    )
    page.screenshot(path=str(screenshot_dir / "dashboard_history.png"), full_page=True)

    page.click("text=All jobs")
    page.wait_for_url("**/admin/awa_django/job/")
    bar = page.locator("#awa-state-summary")
    expect(bar.locator("[data-state=available]")).to_contain_text("available 3")
    href = bar.locator("[data-state=available]").get_attribute("href")
    assert href is not None and href.endswith("?state__exact=available")
    page.goto(live_server.url + href)
    expect(page.locator("#result_list tbody tr")).to_have_count(3)
    page.screenshot(path=str(screenshot_dir / "job_list_summary.png"), full_page=True)
