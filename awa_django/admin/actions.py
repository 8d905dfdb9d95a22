"""Admin actions on jobs. Each one calls the `Client` (so guards and hooks are the same as
from code), needs its own permission and reports what it did and what it skipped."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db import router
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from awa_django.admin import bulk
from awa_django.admin.forms import CompleteCallbackForm, FailCallbackForm
from awa_django.admin.guard import confirms_select_across
from awa_django.bulk import BulkAction
from awa_django.client import Client
from awa_django.exceptions import AwaError, CallbackNotFound, FollowUpFailed
from awa_django.states import JobState
from awa_django.storage.models import Job

# One action handles at most this many selected jobs: retry/cancel are one statement each,
# the callback actions one transaction per job. "Select all N" on retry/cancel has no such
# bound: it runs the chunked bulk operation over the list's filter (bulk.py).
MAX_BULK = 10_000
MAX_CALLBACKS = 500


def _client() -> Client:
    return Client(router.db_for_write(Job))


def _selected_ids(request: HttpRequest, queryset: QuerySet[Job], limit: int) -> list[int] | None:
    ids = list(queryset.order_by().values_list("id", flat=True)[: limit + 1])
    if len(ids) > limit:
        messages.error(request, f"Select at most {limit} jobs for this action.")
        return None
    return ids


def report(request: HttpRequest, noun: str, verb: str, done: int, skipped: int, why: str) -> None:
    """'2 jobs retried; 3 skipped: not failed, cancelled or waiting_external'."""
    text = f"{done} {noun}{'' if done == 1 else 's'} {verb}"
    if skipped:
        text += f"; {skipped} skipped: {why}"
    messages.add_message(request, messages.WARNING if skipped else messages.SUCCESS, text)


def _across(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job], action: BulkAction
) -> tuple[QuerySet[Job] | None, TemplateResponse | None]:
    """The jobs the plain action is to act on, or None when "select all N" was handled here:
    by the confirmation page (returned), by the chunked bulk operation over the change
    list's filter once confirmed, or by an error when that filter cannot be built. So an
    action over more than the page's selection never runs without its confirmation."""
    if not bulk.selects_across(request):
        return queryset, None
    try:
        where = bulk.changelist_filter(request)
    except AwaError as exc:
        messages.error(request, f"Nothing was changed: the list's filter cannot be applied: {exc}")
        return None, None
    if where is None:  # the search names one job: it is the page's selection
        return queryset.filter(pk__in=request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)), None
    return None, bulk.confirm_or_run(modeladmin, request, _client(), action, where)


@confirms_select_across  # the bulk confirmation page (bulk.py)
@admin.action(permissions=["retry_job"], description="Retry selected jobs")
def retry_jobs(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]
) -> TemplateResponse | None:
    selection, page = _across(modeladmin, request, queryset, BulkAction.RETRY)
    if selection is None:
        return page
    ids = _selected_ids(request, selection, MAX_BULK)
    if ids is not None:
        retried = _client().retry_many(ids)
        why = "not failed, cancelled, retryable or waiting_external"
        report(request, "job", "retried", len(retried), len(ids) - len(retried), why)
    return None


@confirms_select_across  # the bulk confirmation page (bulk.py)
@admin.action(permissions=["cancel_job"], description="Cancel selected jobs")
def cancel_jobs(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]
) -> TemplateResponse | None:
    selection, page = _across(modeladmin, request, queryset, BulkAction.CANCEL)
    if selection is None:
        return page
    ids = _selected_ids(request, selection, MAX_BULK)
    if ids is not None:
        try:
            cancelled = _client().cancel_many(ids)
        except FollowUpFailed as exc:
            messages.error(request, f"Nothing was cancelled: {exc}")
            return None
        why = "already completed, failed or cancelled"
        report(request, "job", "cancelled", len(cancelled), len(ids) - len(cancelled), why)
    return None


def _resolve_callbacks(
    request: HttpRequest, queryset: QuerySet[Job], verb: str, resolve: Callable[[uuid.UUID], Any]
) -> None:
    """Resolve the callback of every selected waiting_external job; the rest, and callbacks
    resolved meanwhile (CallbackNotFound), are skipped."""
    ids = _selected_ids(request, queryset, MAX_CALLBACKS)
    if ids is None:
        return
    parked = queryset.filter(
        id__in=ids, state=JobState.WAITING_EXTERNAL, callback_id__isnull=False
    ).values_list("callback_id", flat=True)
    done = sum(_resolved(request, resolve, callback_id) for callback_id in parked if callback_id)
    why = "not waiting_external or callback already resolved"
    report(request, "callback", verb, done, len(ids) - done, why)


def _resolved(
    request: HttpRequest, resolve: Callable[[uuid.UUID], Any], callback_id: uuid.UUID
) -> bool:
    try:
        resolve(callback_id)
    except CallbackNotFound:
        return False
    except FollowUpFailed as exc:  # this callback stays pending; the others go on
        messages.error(request, str(exc))
        return False
    return True


def _intermediate(
    modeladmin: Any,
    request: HttpRequest,
    queryset: QuerySet[Job],
    form: forms.Form,
    title: str,
) -> TemplateResponse:
    """The form page between choosing a callback action and running it; it posts back to
    the change list with the same action and selection plus `apply`."""
    ids = list(queryset.order_by().values_list("id", flat=True)[: MAX_CALLBACKS + 1])
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "opts": opts,
        "form": form,
        "ids": ids[:MAX_CALLBACKS],
        "too_many": len(ids) > MAX_CALLBACKS,
        "action": request.POST.get("action", ""),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media + form.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/awa_django/job/callback_action.html", context)


@confirms_select_across  # its form page lists the jobs
@admin.action(permissions=["complete_callback"], description="Complete callback of selected jobs")
def complete_callbacks(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]
) -> TemplateResponse | None:
    form = CompleteCallbackForm(request.POST if "apply" in request.POST else None)
    if not form.is_valid():
        return _intermediate(modeladmin, request, queryset, form, "Complete callbacks")
    payload = form.cleaned_data["payload"]
    client = _client()
    _resolve_callbacks(
        request, queryset, "completed", lambda cb: client.complete_external(cb, payload)
    )
    return None


@confirms_select_across  # its form page lists the jobs
@admin.action(permissions=["fail_callback"], description="Fail callback of selected jobs")
def fail_callbacks(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]
) -> TemplateResponse | None:
    form = FailCallbackForm(request.POST if "apply" in request.POST else None)
    if not form.is_valid():
        return _intermediate(modeladmin, request, queryset, form, "Fail callbacks")
    error = form.cleaned_data["error"]
    client = _client()
    _resolve_callbacks(request, queryset, "failed", lambda cb: client.fail_external(cb, error))
    return None


@admin.action(permissions=["retry_callback"], description="Retry callback of selected jobs")
def retry_callbacks(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]) -> None:
    client = _client()
    _resolve_callbacks(request, queryset, "retried", client.retry_external)
