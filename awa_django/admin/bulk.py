""" "Apply to all N matching the current filter" for the retry and cancel actions: when
Django's select-across is used, the action runs the Client's chunked bulk operation over
the change list's filter instead of loading every id (decision 018). A confirmation page
shows the count first; the operation's id is reported so `awa_jobs --resume ID` can
finish one that a timed-out request left running."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.http import HttpRequest
from django.template.response import TemplateResponse

from awa_django.admin.guard import CONFIRMED
from awa_django.bulk import BulkAction, BulkProgress, JobFilter
from awa_django.client import Client
from awa_django.exceptions import InvalidJobFilter


def selects_across(request: HttpRequest) -> bool:
    return request.POST.get("select_across") == "1"


def changelist_filter(request: HttpRequest) -> JobFilter | None:
    """The change list's filters (state, queue, kind) and search as a JobFilter; None when
    the search names an id or a callback, or contradicts a filter (at most one job: the
    page's selection serves it). A filter that cannot be built raises its typed error
    (InvalidJobFilter, InvalidQueueName): acting on more than asked is never the answer."""
    params = request.GET
    queue, kind = params.get("queue"), params.get("kind")
    states = (params["state__exact"],) if params.get("state__exact") else ()
    tags: tuple[str, ...] = ()
    term = params.get("q", "").strip()
    if term:
        prefix, _, value = term.partition(":")
        if not value or prefix not in ("kind", "queue", "tag"):
            if term.isdigit() or _is_uuid(term):
                return None
            prefix, value = "kind", term
        if prefix == "tag":
            tags = (value,)
        elif (queue if prefix == "queue" else kind) not in (None, value):
            return None
        elif prefix == "queue":
            queue = value
        else:
            kind = value
    return JobFilter(queue=queue, kind=kind, states=states, tags=tags)


def _is_uuid(term: str) -> bool:
    try:
        uuid.UUID(term)
    except ValueError:
        return False
    return True


def confirm_or_run(
    modeladmin: Any, request: HttpRequest, client: Client, action: BulkAction, where: JobFilter
) -> TemplateResponse | None:
    """The confirmation page (with the count), or, once confirmed, the operation."""
    verb = "retry" if action is BulkAction.RETRY else "cancel"
    try:
        total = client.bulk_count(action, where)
    except InvalidJobFilter as exc:
        messages.error(request, str(exc))
        return None
    if CONFIRMED not in request.POST:
        return _confirmation(modeladmin, request, verb, total)
    user = getattr(request.user, "get_username", lambda: "")()
    # Inside a web request a pause between chunks would only lengthen the request: the
    # admin runs unpaced (decision 024); `awa_jobs` is the tool for very large sets.
    created_by = f"admin:{user}"
    if action is BulkAction.RETRY:
        progress = client.bulk_retry(where, created_by=created_by, busy_fraction=1.0)
    else:
        progress = client.bulk_cancel(where, created_by=created_by, busy_fraction=1.0)
    messages.add_message(request, _level(progress), _summary(progress, verb))
    return None


def _confirmation(modeladmin: Any, request: HttpRequest, verb: str, total: int) -> TemplateResponse:
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{verb.capitalize()} all {total} matching jobs",
        "opts": opts,
        "verb": verb,
        "total": total,
        "action": request.POST.get("action", ""),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        # Django runs an action only with a selection; select_across widens it.
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)[:1],
        "query_string": request.GET.urlencode(),
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/awa_django/job/bulk_confirm.html", context)


def _level(progress: BulkProgress) -> int:
    return messages.WARNING if progress.skipped else messages.SUCCESS


def _summary(progress: BulkProgress, verb: str) -> str:
    past = "retried" if verb == "retry" else "cancelled"
    text = f"{progress.done} job{'' if progress.done == 1 else 's'} {past}"
    if progress.skipped:
        text += f"; {progress.skipped} skipped (held by a worker or changed meanwhile"
        text += f", {progress.conflicts} unique-key conflicts)" if progress.conflicts else ")"
    return f"{text} (bulk operation {progress.id})."
