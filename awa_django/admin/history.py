"""The dashboard's history: charts of throughput, failures and lag per queue over the last
hour or day, a per-kind table, and the job list's state summary bar (decision 021).

The dashboard page includes the fragment once; `history_view` serves it again every few
seconds for static/awa_django/dashboard.js, which swaps it in without a page reload.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.db import router
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from awa_django.admin import charts
from awa_django.client import DEPTH_STATES, HISTORY_RANGES, Client, KindFigures, RollupPoint
from awa_django.display import format_duration

DEFAULT_RANGE = "hour"
REFRESH_SECONDS = 5
KIND_ROWS = 50


def chosen_range(request: HttpRequest) -> str:
    """`?range=hour|day` (anything else: an hour)."""
    value = request.GET.get("range", DEFAULT_RANGE)
    return value if value in HISTORY_RANGES else DEFAULT_RANGE


def history_context(client: Client, range_name: str) -> dict[str, Any]:
    minutes = HISTORY_RANGES[range_name]
    points = client.queue_history(minutes)
    start = _minute(timezone.now()) - dt.timedelta(minutes=minutes)
    palette = charts.colours(sorted({p.queue for p in points}))
    return {
        "history_range": range_name,
        "history_ranges": list(HISTORY_RANGES),
        "history_refresh_seconds": REFRESH_SECONDS,
        "history_legend": list(palette.items()),
        "history_empty": not points,
        "charts": [
            _chart(
                "awa-chart-throughput",
                "Completed per minute",
                "",
                "completed",
                points,
                palette,
                start,
                minutes,
            ),
            _chart(
                "awa-chart-failures",
                "Failed per minute",
                "",
                "failed",
                points,
                palette,
                start,
                minutes,
            ),
            _chart(
                "awa-chart-lag",
                "Lag (oldest available job)",
                "s",
                "lag_seconds",
                points,
                palette,
                start,
                minutes,
            ),
        ],
        "kinds": [_kind_row(k) for k in client.kind_figures(minutes)[:KIND_ROWS]],
    }


def _minute(moment: dt.datetime) -> dt.datetime:
    return moment.replace(second=0, microsecond=0)


def _chart(
    chart_id: str,
    title: str,
    unit: str,
    field: str,
    points: list[RollupPoint],
    palette: dict[str, str],
    start: dt.datetime,
    minutes: int,
) -> dict[str, Any]:
    series = []
    for queue, colour in palette.items():
        # Complete minutes only: the current one has no rollup until it has ended.
        values: list[float | None] = [None] * minutes
        for point in points:
            index = int((point.minute - start).total_seconds() // 60)
            if point.queue == queue and 0 <= index < minutes:
                values[index] = getattr(point, field)
        series.append(charts.Series(queue, values, colour))
    return {
        "id": chart_id,
        "title": title,
        "svg": charts.line_chart(chart_id, title, unit, series, start),
    }


def _kind_row(figures: KindFigures) -> dict[str, Any]:
    p95 = figures.p95_seconds
    return {
        "kind": figures.kind,
        "count": figures.count,
        "failed": figures.failed,
        "failure_rate": f"{figures.failure_rate:.1%}",
        "p95": "-" if p95 is None else format_duration(p95),
    }


def history_view(model_admin: Any, request: HttpRequest) -> TemplateResponse:
    """The history fragment alone (the dashboard's periodic refresh)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    client = Client(_using(model_admin))
    context = history_context(client, chosen_range(request))
    return TemplateResponse(request, "admin/awa_django/dashboard_history.html", context)


def history_url(model_admin: Any) -> str:
    return reverse(f"{model_admin.admin_site.name}:awa_django_dashboard_history")


def _using(model_admin: Any) -> str:
    return router.db_for_write(model_admin.model)


def state_summary(model_admin: Any, changelist: str) -> dict[str, Any]:
    """The job list's summary bar: jobs per live state, each a share of the bar and a link
    to the list filtered on that state. One query, on indexes only (storage.history)."""
    counts = Client(_using(model_admin)).state_counts()
    total = sum(counts.values()) or 1
    return {
        "awa_state_summary": [
            {
                "state": state,
                "count": counts[state],
                "percent": f"{100 * counts[state] / total:.2f}",
                "url": changelist + "?" + urlencode({"state__exact": state}),
            }
            for state in DEPTH_STATES
            if counts.get(state)
        ]
    }
