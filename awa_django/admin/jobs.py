"""The job admin: a list that stays fast on millions of rows, a read-only detail page,
operator actions with one permission each, and the dashboard's URLs.

The list runs only what it declares from the query string: its three filters (each served
by an index), the exact search and ordering by id. Anything else is refused (400, by
admin/guard.py) or ignored, never run as a table scan and never a 500 (docs/admin.md,
"Query string")."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Left
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from awa_django.admin import actions, dashboard, detail, history, key_limits, limits
from awa_django.admin.filters import KindFilter, QueueFilter
from awa_django.admin.flows import FlowDetailMixin, cancel_flows
from awa_django.admin.forms import CompleteCallbackForm, FailCallbackForm
from awa_django.admin.guard import AdminGuard
from awa_django.admin.object_actions import Button, ObjectActionsMixin
from awa_django.admin.paginator import EstimatedCountPaginator
from awa_django.admin.routing import ReplicaReadsMixin
from awa_django.display import format_duration, format_priority
from awa_django.states import TERMINAL_STATES, JobState
from awa_django.storage.models import ActiveLease, Job, has_tag, in_queue

LAST_ERROR_CHARS = 80
MAX_BIGINT = 2**63 - 1
MAX_BIGINT_DIGITS = len(str(MAX_BIGINT))
# Columns the list never shows; args alone may be 256 KB per row.
LIST_DEFERRED = ("args", "errors", "metadata", "progress", "result", "unique_key")
# Posted with a callback form: the action then runs instead of showing its form page.
APPLY = {"apply": "1"}

# ModelAdmin is generic in django-stubs only; Django's class cannot be subscripted at runtime.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Job]
else:
    _ModelAdmin = admin.ModelAdmin


class JobChangeList(ChangeList):
    """Loads only what the list shows: heavy JSON columns deferred, the last error's
    first characters computed by PostgreSQL. Sorts only by the `sortable_by` columns."""

    def get_ordering_field(self, field_name: Any) -> Any:
        # Django honours `?o=<n>` for any list_display column backed by a model field, as
        # sortable_by only hides the header links; other columns would sort the table.
        if field_name not in (self.sortable_by or ()):
            return None
        return super().get_ordering_field(field_name)

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Job]:
        queryset: QuerySet[Job] = super().get_queryset(request, exclude_parameters)
        last_error = KeyTextTransform("error", KeyTransform("-1", "errors"))
        return queryset.defer(*LIST_DEFERRED).annotate(
            last_error_head=Left(last_error, LAST_ERROR_CHARS + 1)
        )


def search_filter(term: str) -> Q:
    """Exact matches only, each served by an index: a number is an id, a UUID a callback
    id, `tag:x` a tag, `queue:x` a queue, `kind:x` or any other word a kind.

    A plain word is not also tried as a tag: `kind = x OR tags @> {x}` defeats the
    planner's estimate, and with `ORDER BY id DESC LIMIT 50` it walks the primary key
    backwards through the whole table when few rows match (measured: 0.9 s at 1M rows).
    """
    if "\x00" in term:
        return Q(pk__in=[])  # no stored text holds a NUL, and PostgreSQL rejects it in a query
    prefix, _, value = term.partition(":")
    if value and prefix == "tag":
        return has_tag(value)
    if value and prefix == "queue":
        return in_queue(value)
    if value and prefix == "kind":
        return Q(kind=value)
    # ASCII digits only: "²".isdigit() is true but int() refuses it; the length test keeps
    # int() away from its 4,300-digit limit.
    if term.isascii() and term.isdigit():
        too_big = len(term) > MAX_BIGINT_DIGITS or int(term) > MAX_BIGINT
        return Q(pk__in=[]) if too_big else Q(id=int(term))
    try:
        return Q(callback_id=uuid.UUID(term))
    except ValueError:
        return Q(kind=term)


class JobQueueFilter(QueueFilter):
    """The queue filter, spelled so that the partial queue index serves it (decision 028)."""

    def match(self, value: str) -> Q:
        return in_queue(value)


class JobAdmin(AdminGuard, ObjectActionsMixin, FlowDetailMixin, ReplicaReadsMixin, _ModelAdmin):
    list_display = (
        "id",
        "kind",
        "queue",
        "state_badge",
        "attempts",
        "priority_label",
        "run_at",
        "age",
        "last_error",
    )
    list_display_links = ("id", "kind")
    list_filter = ("state", JobQueueFilter, KindFilter)
    # Only the primary key orders the list: any other sort would sort the whole table.
    sortable_by = ("id",)
    search_fields = ("kind",)  # shows the box; get_search_results does the matching
    search_help_text = (
        "Exact match: a job id, a callback id or a kind; tag:… for a tag, queue:… for a queue."
    )
    list_per_page = 50
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = [
        actions.retry_jobs,
        actions.cancel_jobs,
        cancel_flows,
        actions.complete_callbacks,
        actions.fail_callbacks,
        actions.retry_callbacks,
    ]
    readonly_fields = (
        "id",
        "kind",
        "queue",
        "state_badge",
        "priority_label",
        "attempts",
        "tags",
        "callback_id",
        "callback_timeout_at",
        "progress_bar",
        "live_lease",
        "timeline",
        "args_pretty",
        "error_history",
        "metadata_pretty",
        "result_pretty",
        "run_at",
        "created_at",
        "attempted_at",
        "finalized_at",
        "attempted_by",
        # The Workflow panel, shown for a job in a flow (admin/flows.py).
        "flow_parents",
        "flow_children",
        "flow_batch",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("id", "kind", "queue"),
                    ("state_badge", "attempts", "priority_label"),
                    "tags",
                    ("callback_id", "callback_timeout_at"),
                )
            },
        ),
        ("Progress", {"fields": ("progress_bar",)}),
        ("Lease", {"fields": ("live_lease",)}),
        ("Timeline", {"fields": ("timeline",)}),
        ("Args", {"fields": ("args_pretty",)}),
        ("Errors", {"fields": ("error_history",)}),
        ("Metadata and result", {"fields": ("metadata_pretty", "result_pretty")}),
        (
            "Timestamps",
            {
                "fields": (
                    ("run_at", "created_at"),
                    ("attempted_at", "finalized_at"),
                    "attempted_by",
                )
            },
        ),
    )

    class Media:
        css = {"all": ("awa_django/admin.css",)}

    # -- permissions: jobs are enqueued by code and owned by the runtime ------------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # Terminal jobs only, one at a time. Without an object this is the bulk
        # "delete selected" action, which would remove queued and running jobs too
        # (pruning owns terminal rows in bulk).
        if obj is None or obj.state not in TERMINAL_STATES:
            return False
        return super().has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        # Re-checked in the statement: the job may have been retried since the page loaded.
        Job.objects.filter(pk=obj.pk, state__in=TERMINAL_STATES).delete()

    def _has(self, request: HttpRequest, codename: str) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def has_retry_job_permission(self, request: HttpRequest) -> bool:
        return self._has(request, "retry_job")

    def has_cancel_job_permission(self, request: HttpRequest) -> bool:
        return self._has(request, "cancel_job")

    def has_complete_callback_permission(self, request: HttpRequest) -> bool:
        return self._has(request, "complete_callback")

    def has_fail_callback_permission(self, request: HttpRequest) -> bool:
        return self._has(request, "fail_callback")

    def has_retry_callback_permission(self, request: HttpRequest) -> bool:
        return self._has(request, "retry_callback")

    # -- list -----------------------------------------------------------------------------
    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        term = search_term.strip()
        return (queryset.filter(search_filter(term)) if term else queryset), False

    @admin.display(description="state")
    def state_badge(self, obj: Job) -> SafeString:
        return format_html('<span class="awa-badge awa-state-{}">{}</span>', obj.state, obj.state)

    @admin.display(description="attempt")
    def attempts(self, obj: Job) -> str:
        return f"{obj.attempt}/{obj.max_attempts}"

    @admin.display(description="priority")
    def priority_label(self, obj: Job) -> str:
        return format_priority(obj.priority, obj.original_priority)

    @admin.display(description="age")
    def age(self, obj: Job) -> str:
        return format_duration((timezone.now() - obj.created_at).total_seconds())

    @admin.display(description="last error")
    def last_error(self, obj: Job) -> str:
        head = getattr(obj, "last_error_head", None)
        if head is None:
            return ""
        one_line = " ".join(head.split())
        return one_line if len(head) <= LAST_ERROR_CHARS else one_line[:LAST_ERROR_CHARS] + "…"

    # -- detail ---------------------------------------------------------------------------
    def object_buttons(self, obj: Job) -> list[Button]:
        """The list's actions that apply in the job's state (the Client re-checks it)."""
        buttons = []
        if obj.state in (JobState.FAILED, JobState.CANCELLED, JobState.RETRYABLE):
            buttons.append(Button("retry_jobs", "Retry"))
        if obj.state == JobState.WAITING_EXTERNAL and obj.callback_id:
            buttons += [
                Button("complete_callbacks", "Complete", CompleteCallbackForm(), fields=APPLY),
                Button("fail_callbacks", "Fail", FailCallbackForm(), danger=True, fields=APPLY),
                Button("retry_callbacks", "Retry"),
            ]
        if obj.state not in TERMINAL_STATES:
            buttons.append(Button("cancel_jobs", "Cancel", danger=True))
        if obj.state not in TERMINAL_STATES and obj.has_dependents:
            buttons.append(Button("cancel_flows", "Cancel with waiting children", danger=True))
        return buttons

    def _lease(self, obj: Job) -> ActiveLease | None:
        # Looked up once per page although the lease and the timeline both show it.
        if "_awa_lease" not in obj.__dict__:
            # From the database the job was read from (the replica on a plain page view).
            leases = ActiveLease.objects.using(obj._state.db)
            # This attempt's: a lease another attempt left (decision 030) is not its.
            this_attempt = leases.filter(job_id=obj.pk, run_lease=obj.run_lease)
            obj.__dict__["_awa_lease"] = this_attempt.first()
        lease: ActiveLease | None = obj.__dict__["_awa_lease"]
        return lease

    @admin.display(description="progress")
    def progress_bar(self, obj: Job) -> SafeString:
        return detail.progress_bar(obj.progress)

    @admin.display(description="lease")
    def live_lease(self, obj: Job) -> SafeString:
        return detail.lease_table(self._lease(obj), obj)

    @admin.display(description="timeline")
    def timeline(self, obj: Job) -> SafeString:
        return detail.timeline(obj, self._lease(obj))

    @admin.display(description="args")
    def args_pretty(self, obj: Job) -> SafeString:
        url = reverse(f"{self.admin_site.name}:awa_django_job_args", args=[obj.pk])
        return detail.json_block(obj.args, url)

    @admin.display(description="error history")
    def error_history(self, obj: Job) -> SafeString:
        return detail.error_history(obj.errors)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Job) -> SafeString:
        return detail.json_block(obj.metadata)

    @admin.display(description="result")
    def result_pretty(self, obj: Job) -> SafeString:
        return detail.json_block(obj.result)

    def args_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The whole args of one job as JSON (the detail page shows only the head)."""
        job = get_object_or_404(self.get_queryset(request).only("id", "args"), pk=object_id)
        if not self.has_view_permission(request, job):
            raise PermissionDenied
        return JsonResponse(job.args, safe=False, json_dumps_params={"indent": 2})

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, with the state summary bar above it (admin/history.py). Added to a
        list about to render only: a refused query string still runs no query."""
        response = super().changelist_view(request, extra_context)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            changelist = reverse(f"{self.admin_site.name}:awa_django_job_changelist")
            response.context_data.update(history.state_summary(self, changelist))
        return response

    # -- URLs -----------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        own = [
            path(
                "dashboard/",
                wrap(lambda request: dashboard.dashboard_view(self, request)),
                name="awa_django_dashboard",
            ),
            path(
                "dashboard/queues/",
                wrap(lambda request: dashboard.queue_operation_view(self, request)),
                name="awa_django_queue_operation",
            ),
            path(
                "dashboard/limits/",
                wrap(lambda request: limits.queue_limits_view(self, request)),
                name="awa_django_queue_limits",
            ),
            path(
                "dashboard/keys/",
                wrap(lambda request: key_limits.keys_view(self, request)),
                name="awa_django_keys",
            ),
            path(
                "dashboard/keys/limits/",
                wrap(lambda request: key_limits.key_limits_view(self, request)),
                name="awa_django_key_limits",
            ),
            path(
                "dashboard/history/",
                wrap(lambda request: history.history_view(self, request)),
                name="awa_django_dashboard_history",
            ),
            path("<int:object_id>/args/", wrap(self.args_view), name="awa_django_job_args"),
            path("<int:object_id>/flow/", wrap(self.flow_view), name="awa_django_job_flow"),
        ]
        return own + super().get_urls()
