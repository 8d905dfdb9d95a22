"""The dashboard's runtime-limits form: sets or clears one queue's concurrency and rate
overrides through the Client (one permission, `awa_django.set_queue_limits`)."""

from __future__ import annotations

from collections.abc import Callable
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
    def change(client: Client, form: Any, by: str) -> str:
        queue = form.cleaned_data["queue"]
        if form.cleaned_data["operation"] == "clear":
            client.clear_queue_limits(queue)
            return f"Queue {queue}: overrides cleared, its settings apply."
        client.set_queue_limits(
            queue,
            concurrency=form.cleaned_data["concurrency"],
            rate_limit=form.rate_limit(),
            by=by,
        )
        return f"Queue {queue}: new limits apply on every worker within seconds."

    return posted_limits(
        model_admin, request, QueueLimitsForm(request.POST), "awa_django_dashboard", "Limits",
        change, InvalidQueueLimits,
    )  # fmt: skip


def posted_limits(
    model_admin: Any,
    request: HttpRequest,
    form: Any,
    page: str,
    noun: str,
    change: Callable[[Client, Any, str], str],
    refused: type[Exception],
) -> HttpResponse:
    """A limits form's POST (queue limits here, key limits in key_limits.py): permission,
    validation, `change` through the Client (its success message, or `refused` as an error
    message), and back to the admin `page` either way."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not request.user.has_perm(LIMITS_PERMISSION):
        raise PermissionDenied
    target = HttpResponseRedirect(reverse(f"{model_admin.admin_site.name}:{page}"))
    if not form.is_valid():
        messages.error(request, f"{noun} not changed: {form.errors.as_text()}")
        return target
    client = Client(router.db_for_write(model_admin.model))
    try:
        done = change(client, form, request.user.get_username())
    except refused as exc:
        messages.error(request, f"{noun} not changed: {exc}")
        return target
    messages.success(request, done)
    return target
