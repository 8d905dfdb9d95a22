"""The queue dashboard inside the admin: per-queue figures, live workers, pause/resume."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from awa_django.admin import history
from awa_django.admin.forms import QueueOperationForm
from awa_django.admin.routing import pin_primary, primary, read_alias
from awa_django.client import DEPTH_STATES, Client, LiveWorker, QueueStats
from awa_django.conf import awa_settings
from awa_django.display import format_duration
from awa_django.states import JobState

PAUSE_PERMISSION = "awa_django.pause_queue"
WINDOW_MINUTES = 5


BUSIEST_KEYS = 10


def dashboard_view(model_admin: Any, request: HttpRequest) -> TemplateResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    client = Client(read_alias(request, model_admin.model))
    stats = client.queue_stats(WINDOW_MINUTES)
    changelist = reverse(f"{model_admin.admin_site.name}:awa_django_job_changelist")
    dead_letters = reverse(f"{model_admin.admin_site.name}:awa_django_deadletter_changelist")
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Queue dashboard",
        "opts": model_admin.model._meta,
        # A zero-width space after "_" lets a long state name wrap in its header.
        "states": [state.replace("_", "_\u200b") for state in DEPTH_STATES],
        "queues": [_queue_row(q, changelist, dead_letters) for q in stats],
        "workers": [_worker_row(w) for w in client.live_workers()],
        "unhandled": _unhandled_rows(client.unhandled_kinds(), changelist),
        # The busiest concurrency keys (decision 045); the panel shows only when keys are used.
        "busiest_keys": client.busiest_keys(BUSIEST_KEYS),
        "dead_letters": _dead_letter_rows(
            {q.queue: q.dead_letters for q in stats if q.dead_letters}, model_admin
        ),
        "dead_letter_retention": format_duration(awa_settings().dead_letter_retention),
        "window_minutes": WINDOW_MINUTES,
        "can_pause": request.user.has_perm(PAUSE_PERMISSION),
        "can_set_limits": request.user.has_perm("awa_django.set_queue_limits"),
        "limits_url": reverse(f"{model_admin.admin_site.name}:awa_django_queue_limits"),
        "operation_url": reverse(f"{model_admin.admin_site.name}:awa_django_queue_operation"),
        "changelist_url": changelist,
        # Charts and the per-kind table (admin/history.py), refreshed in place.
        **history.history_context(client, history.chosen_range(request)),
        "history_url": history.history_url(model_admin),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/awa_django/dashboard.html", context)


def _unhandled_rows(kinds: dict[str, int], changelist: str) -> list[dict[str, Any]]:
    """Kinds with waiting jobs that no live worker can run (a deploy in progress, or a
    worker missing): each links to its jobs."""
    return [
        {"kind": kind, "waiting": count, "url": changelist + "?" + urlencode({"kind": kind})}
        for kind, count in sorted(kinds.items())
    ]


def _dead_letter_rows(depth: dict[str, int], model_admin: Any) -> list[dict[str, Any]]:
    """Dead letters per queue, each linking to its dead letters (docs/dead-letters.md)."""
    changelist = reverse(f"{model_admin.admin_site.name}:awa_django_deadletter_changelist")
    return [
        {"queue": queue, "count": count, "url": changelist + "?" + urlencode({"queue": queue})}
        for queue, count in depth.items()
    ]


def _client(model_admin: Any) -> Client:
    """A Client on the database the admin writes jobs to."""
    return Client(primary(model_admin.model))


def _queue_row(stats: QueueStats, changelist: str, dead_letters: str) -> dict[str, Any]:
    def link(state: str) -> str:
        return changelist + "?" + urlencode({"queue": stats.queue, "state__exact": state})

    return {
        "name": stats.queue,
        "depth": [(s, stats.depth.get(s, 0), link(s)) for s in DEPTH_STATES],
        "dead_letters": stats.dead_letters,
        "dead_letters_url": dead_letters + "?" + urlencode({"queue": stats.queue}),
        "running": stats.running,
        "completed_last_minute": stats.completed_last_minute,
        "completed_in_window": stats.completed_in_window,
        "per_minute": f"{stats.throughput_per_minute:.1f}",
        "lag": format_duration(stats.lag_seconds),
        "paused": stats.paused,
        "paused_by": stats.paused_by,
        "paused_at": stats.paused_at,
        "completed_url": link(JobState.COMPLETED),
        "limits": stats.limits,
        "overridden": stats.concurrency_override is not None or stats.rate_override is not None,
    }


def _worker_row(worker: LiveWorker) -> dict[str, Any]:
    seen = (timezone.now() - worker.last_seen_at).total_seconds()
    return {
        "worker": worker,
        "queues": _queue_names(worker.queues),
        "seen_ago": format_duration(max(seen, 0.0)),
    }


def _queue_names(raw: object) -> str:
    """'default=10, email=4' from the runtime's {queue: concurrency} map."""
    if isinstance(raw, dict):
        return ", ".join(f"{q}={n}" for q, n in sorted(raw.items()))
    if isinstance(raw, list):
        return ", ".join(map(str, raw))
    return str(raw or "")


def queue_operation_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """Pause or resume one queue (POST from a dashboard button)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not request.user.has_perm(PAUSE_PERMISSION):
        raise PermissionDenied
    form = QueueOperationForm(request.POST)
    target = reverse(f"{model_admin.admin_site.name}:awa_django_dashboard")
    if not form.is_valid():
        messages.error(request, f"Queue not changed: {form.errors.as_text()}")
        return HttpResponseRedirect(target)
    queue = form.cleaned_data["queue"]
    pin_primary(request)
    if form.cleaned_data["operation"] == "pause":
        _client(model_admin).pause_queue(queue, by=request.user.get_username())
        messages.success(request, f"Queue {queue} paused: workers claim no new jobs from it.")
    else:
        _client(model_admin).resume_queue(queue)
        messages.success(request, f"Queue {queue} resumed.")
    return HttpResponseRedirect(target)
