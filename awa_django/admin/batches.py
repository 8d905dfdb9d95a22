"""Batches in the admin (docs/workflows.md, "Admin"): a read-only list with each batch's
counts (ended of total: completed, failed, cancelled) and a filter by finished or not, and
a detail page with its progress, its callbacks and its first members with their live
states; the *Cancel selected batches* action (and the detail page's *Cancel* button) takes
the jobs' `cancel_job` permission. The counts are the batch row's own, kept by the fan-in
trigger in each member's transition; members' states are read through the Client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from awa_django.admin import detail, flows
from awa_django.admin.guard import AdminGuard
from awa_django.admin.object_actions import Button, ObjectActionsMixin
from awa_django.admin.routing import ReplicaReadsMixin, primary
from awa_django.client import Client
from awa_django.storage.workflows import Batch

# The detail page lists this many members (ascending ids); the counts cover them all.
MEMBERS_SHOWN = 50
# One cancel action takes at most this many batches.
MAX_SELECTED = 100

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Batch]
else:
    _ModelAdmin = admin.ModelAdmin


class FinishedFilter(admin.SimpleListFilter):
    """Finished (every member ended) or not; served by the batches' primary key order."""

    title = "finished"
    parameter_name = "finished"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "finished"), ("no", "not finished")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("yes", "no"):
            return queryset.filter(finished_at__isnull=self.value() == "no")
        return queryset


class BatchAdmin(AdminGuard, ObjectActionsMixin, ReplicaReadsMixin, _ModelAdmin):
    list_display = (
        "id",
        "ended_of_total",
        "completed",
        "failed",
        "cancelled",
        "created_at",
        "finished_at",
    )
    list_filter = (FinishedFilter,)
    sortable_by = ("id",)
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ["cancel_batches"]
    readonly_fields = (
        "id",
        "ended_of_total",
        "progress",
        "completed",
        "failed",
        "cancelled",
        "total",
        "created_at",
        "finished_at",
        "callbacks",
        "members",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("id", "ended_of_total"),
                    "progress",
                    ("completed", "failed", "cancelled", "total"),
                    ("created_at", "finished_at"),
                )
            },
        ),
        ("Callbacks", {"fields": ("callbacks",)}),
        ("Members", {"fields": ("members",)}),
    )

    class Media:
        css = {"all": ("awa_django/admin.css",)}

    # -- permissions: batches are made by code and counted by the database ---------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Batch | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Batch | None = None) -> bool:
        return False  # pruning removes a batch with its members

    def has_cancel_batch_permission(self, request: HttpRequest) -> bool:
        # Cancelling a batch cancels jobs: the jobs' own permission.
        return request.user.has_perm(f"{self.opts.app_label}.cancel_job")

    @admin.action(permissions=["cancel_batch"], description="Cancel selected batches")
    def cancel_batches(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        """`Client.cancel_batch` for each: its callbacks and every member not yet ended."""
        ids = list(queryset.order_by().values_list("id", flat=True)[: MAX_SELECTED + 1])
        if len(ids) > MAX_SELECTED:
            messages.error(request, f"Select at most {MAX_SELECTED} batches for this action.")
            return
        cancelled = Client(primary(Batch)).cancel_batches(ids)
        noun = "batch" if len(ids) == 1 else "batches"
        messages.success(request, f"{len(ids)} {noun} cancelled: {len(cancelled)} jobs.")

    # -- list and detail ------------------------------------------------------------------
    def object_buttons(self, obj: Batch) -> list[Button]:
        return [] if obj.finished_at else [Button("cancel_batches", "Cancel", danger=True)]

    @admin.display(description="ended")
    def ended_of_total(self, obj: Batch) -> str:
        ended = obj.completed + obj.failed + obj.cancelled
        return f"{ended} of {obj.total}" + (" (finished)" if obj.finished_at else "")

    @admin.display(description="progress")
    def progress(self, obj: Batch) -> SafeString:
        ended = obj.completed + obj.failed + obj.cancelled
        percent = 100.0 * ended / obj.total if obj.total else 100.0
        return detail.progress_bar({"percent": percent, "message": "of the members ended"})

    @admin.display(description="callbacks")
    def callbacks(self, obj: Batch) -> SafeString:
        named = [
            (name, job_id)
            for name, job_id in (
                ("on_success", obj.on_success_id),
                ("on_complete", obj.on_complete_id),
            )
            if job_id is not None
        ]
        if not named:
            return format_html('<span class="awa-muted">{}</span>', "none")
        nodes = Client(obj._state.db).job_nodes([job_id for _, job_id in named])
        site = self.admin_site.name
        # A callback is a child of every member: its flow page shows the whole batch.
        flow = reverse(f"{site}:awa_django_job_flow", args=[named[0][1]])
        return format_html(
            '<ul class="awa-flow-nodes">{}</ul><p><a href="{}" id="awa-batch-flow">Show the '
            "batch's flow</a></p>",
            format_html_join(
                "",
                "<li><code>{}</code> {} {}</li>",
                (
                    (name, flows.node_link(site, node), flows.state_badge(node.state))
                    for (name, _), node in zip(named, nodes, strict=True)
                ),
            ),
            flow,
        )

    @admin.display(description="members")
    def members(self, obj: Batch) -> SafeString:
        client = Client(obj._state.db)
        ids = client.batch_members(obj.pk)
        shown = client.job_nodes(ids[:MEMBERS_SHOWN])
        hidden = len(ids) - len(shown)
        more = (
            format_html(
                '<p class="awa-truncated">and {} more: each member\'s page links here.</p>',
                hidden,
            )
            if hidden > 0
            else ""
        )
        return format_html("{}{}", flows.node_list(self.admin_site.name, shown), more)
