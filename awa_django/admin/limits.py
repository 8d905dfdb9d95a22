"""The dashboard's runtime-limits form: sets or clears one queue's concurrency and rate
overrides through the Client (one permission, `awa_django.set_queue_limits`)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import router
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse

from awa_django.admin.forms import QueueLimitsForm
from awa_django.client import Client
from awa_django.exceptions import InvalidQueueLimits

LIMITS_PERMISSION = "awa_django.set_queue_limits"


def queue_limits_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not request.user.has_perm(LIMITS_PERMISSION):
        raise PermissionDenied
    target = reverse(f"{model_admin.admin_site.name}:awa_django_dashboard")
    form = QueueLimitsForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Limits not changed: {form.errors.as_text()}")
        return HttpResponseRedirect(target)
    client = Client(router.db_for_write(model_admin.model))
    queue = form.cleaned_data["queue"]
    if form.cleaned_data["operation"] == "clear":
        client.clear_queue_limits(queue)
        messages.success(request, f"Queue {queue}: overrides cleared, its settings apply.")
        return HttpResponseRedirect(target)
    try:
        client.set_queue_limits(
            queue,
            concurrency=form.cleaned_data["concurrency"],
            rate_limit=form.rate_limit(),
            by=request.user.get_username(),
        )
    except InvalidQueueLimits as exc:
        messages.error(request, f"Limits not changed: {exc}")
        return HttpResponseRedirect(target)
    messages.success(request, f"Queue {queue}: new limits apply on every worker within seconds.")
    return HttpResponseRedirect(target)
