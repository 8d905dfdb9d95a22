"""Dead letters in the admin (docs/dead-letters.md): a read-only list with filters by
reason, queue and kind, a detail page with the error history, and the retry and purge
actions, one permission each, which call the Client."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db import router
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.safestring import SafeString

from awa_django.admin import detail
from awa_django.admin.actions import report
from awa_django.admin.filters import KindFilter, QueueFilter
from awa_django.admin.guard import AdminGuard
from awa_django.admin.object_actions import Button, ObjectActionsMixin
from awa_django.admin.routing import ReplicaReadsMixin
from awa_django.client import Client
from awa_django.storage.models import DeadLetter

# One action handles at most this many dead letters (the Client batches them).
MAX_SELECTED = 10_000
LAST_ERROR_CHARS = 80

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[DeadLetter]
else:
    _ModelAdmin = admin.ModelAdmin


def _client() -> Client:
    return Client(router.db_for_write(DeadLetter))


def _selected(request: HttpRequest, queryset: QuerySet[DeadLetter]) -> list[int] | None:
    ids = list(queryset.order_by().values_list("id", flat=True)[: MAX_SELECTED + 1])
    if len(ids) > MAX_SELECTED:
        messages.error(request, f"Select at most {MAX_SELECTED} dead letters for this action.")
        return None
    return ids


class DeadLetterAdmin(AdminGuard, ObjectActionsMixin, ReplicaReadsMixin, _ModelAdmin):
    list_display = ("id", "kind", "queue", "reason", "attempts", "dead_lettered_at", "last_error")
    list_display_links = ("id", "kind")
    list_filter = ("reason", QueueFilter, KindFilter)
    search_fields = ("=kind",)
    search_help_text = "Exact match on the kind."
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ["retry_dead_letters", "purge_dead_letters"]
    readonly_fields = (
        "id",
        "kind",
        "queue",
        "reason",
        "attempts",
        "priority",
        "tags",
        "created_at",
        "attempted_at",
        "dead_lettered_at",
        "attempted_by",
        "args_pretty",
        "error_history",
        "metadata_pretty",
        "progress_pretty",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    ("id", "kind", "queue"),
                    ("reason", "attempts", "priority"),
                    "tags",
                    ("created_at", "attempted_at", "dead_lettered_at"),
                    "attempted_by",
                )
            },
        ),
        ("Errors", {"fields": ("error_history",)}),
        ("Args", {"fields": ("args_pretty",)}),
        ("Metadata and progress", {"fields": ("metadata_pretty", "progress_pretty")}),
    )

    class Media:
        css = {"all": ("awa_django/admin.css",)}

    # -- permissions: rows arrive from the runtime and leave through the actions ----------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: DeadLetter | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: DeadLetter | None = None) -> bool:
        return False  # the purge action, with its own permission, deletes

    def has_retry_dead_letter_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.retry_dead_letter")

    def has_purge_dead_letter_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.purge_dead_letter")

    # -- list and detail ----------------------------------------------------------------
    def object_buttons(self, obj: DeadLetter) -> list[Button]:
        return [
            Button("retry_dead_letters", "Retry"),
            Button("purge_dead_letters", "Purge", danger=True),
        ]

    def after_action_url(self, request: HttpRequest, obj: DeadLetter, action: str) -> str:
        """After a retry that went through, the job it became."""
        gone = not self.get_queryset(request).filter(pk=obj.pk).exists()
        if action == "retry_dead_letters" and gone:
            return reverse(f"{self.admin_site.name}:awa_django_job_change", args=[obj.pk])
        return super().after_action_url(request, obj, action)

    @admin.display(description="attempt")
    def attempts(self, obj: DeadLetter) -> str:
        return f"{obj.attempt}/{obj.max_attempts}"

    @admin.display(description="last error")
    def last_error(self, obj: DeadLetter) -> str:
        text = str(obj.errors[-1].get("error", "")) if obj.errors else ""
        one_line = " ".join(text.split())
        return one_line if len(one_line) <= LAST_ERROR_CHARS else one_line[:LAST_ERROR_CHARS] + "…"

    @admin.display(description="error history")
    def error_history(self, obj: DeadLetter) -> SafeString:
        return detail.error_history(obj.errors)

    @admin.display(description="args")
    def args_pretty(self, obj: DeadLetter) -> SafeString:
        return detail.json_block(obj.args)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: DeadLetter) -> SafeString:
        return detail.json_block(obj.metadata)

    @admin.display(description="progress")
    def progress_pretty(self, obj: DeadLetter) -> SafeString:
        return detail.json_block(obj.progress)

    # -- actions (through the Client) ---------------------------------------------------
    @admin.action(permissions=["retry_dead_letter"], description="Retry selected dead letters")
    def retry_dead_letters(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        ids = _selected(request, queryset)
        if ids is not None:
            result = _client().retry_dead_letters(ids=ids)
            why = "a live job holds their unique key, or they were already gone"
            report(
                request,
                "dead letter",
                "retried",
                len(result.retried),
                len(ids) - len(result.retried),
                why,
            )

    @admin.action(permissions=["purge_dead_letter"], description="Purge selected dead letters")
    def purge_dead_letters(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        ids = _selected(request, queryset)
        if ids is not None:
            purged = _client().purge_dead_letters(ids=ids)
            report(request, "dead letter", "purged", purged, len(ids) - purged, "already gone")
