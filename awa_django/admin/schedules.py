"""Cron schedules in the admin: the list (expression, zone, paused, last and next fire, the
job the last fire enqueued) and the pause/resume/trigger/remove actions, which call the
Client. Rows are read-only here: their definition comes from `periodic(...)` in code."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db import router
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from awa_django.admin import detail
from awa_django.admin.guard import AdminGuard
from awa_django.admin.object_actions import Button, ObjectActionsMixin
from awa_django.admin.routing import ReplicaReadsMixin
from awa_django.client import Client
from awa_django.cron import check_timezone, next_fire_after, upcoming_fire
from awa_django.exceptions import ScheduleNotFound
from awa_django.storage.models import CronSchedule

MANAGE = "manage_schedule"
# How many coming fires the detail page lists.
NEXT_FIRES = 5

# Django's ModelAdmin takes no type argument at runtime; the stubs want one (as in jobs.py).
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[CronSchedule]
else:
    _ModelAdmin = admin.ModelAdmin


class CronScheduleAdmin(AdminGuard, ObjectActionsMixin, ReplicaReadsMixin, _ModelAdmin):
    list_display = (
        "name",
        "kind",
        "expression",
        "timezone",
        "missed_fire_policy",
        "status",
        "last_fire_at",
        "next_fire",
        "last_job",
    )
    list_filter = ("paused", "missed_fire_policy")
    search_fields = ("name", "kind")
    actions = ["pause_schedules", "resume_schedules", "trigger_schedules", "remove_schedules"]
    readonly_fields = (
        "name",
        "kind",
        "queue",
        "expression",
        "timezone",
        "missed_fire_policy",
        "status",
        "next_fires",
        "last_fire_at",
        "last_job",
        "priority",
        "max_attempts",
        "tags",
        "args_pretty",
        "metadata_pretty",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": (("name", "kind", "queue"), ("expression", "timezone"), "status")}),
        (
            "Fires",
            {"fields": ("missed_fire_policy", "next_fires", ("last_fire_at", "last_job"))},
        ),
        ("Job", {"fields": (("priority", "max_attempts"), "tags", "args_pretty")}),
        ("Metadata", {"fields": ("metadata_pretty", ("created_at", "updated_at"))}),
    )

    class Media:
        css = {"all": ("awa_django/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[CronSchedule]:
        # The database clock, read with the rows, is what the next fire is computed from.
        queryset: QuerySet[CronSchedule] = super().get_queryset(request)
        return queryset.annotate(db_now=Now())

    def object_buttons(self, obj: CronSchedule) -> list[Button]:
        flip = (
            Button("resume_schedules", "Resume")
            if obj.paused
            else Button("pause_schedules", "Pause", danger=True)
        )
        return [flip, Button("trigger_schedules", "Trigger now")]

    @admin.display(description="status", ordering="paused")
    def status(self, obj: CronSchedule) -> SafeString:
        if not obj.paused:
            return format_html('<span class="awa-badge awa-active">{}</span>', "Active")
        by = f" by {obj.paused_by}" if obj.paused_by else ""
        at = f" since {detail.when(obj.paused_at)}" if obj.paused_at else ""
        return format_html(
            '<span class="awa-badge awa-paused" title="{}">{}</span>', by + at, "Paused"
        )

    def _fires(self, obj: CronSchedule, count: int) -> list[dt.datetime]:
        """The coming fires, the first as the leader will enqueue it (upcoming_fire)."""
        now = getattr(obj, "db_now", None) or obj.updated_at
        fire = upcoming_fire(
            obj.expression,
            obj.timezone,
            obj.missed_fire_policy,
            obj.last_fire_at,
            obj.created_at,
            now,
        )
        fires: list[dt.datetime] = []
        while fire is not None and len(fires) < count:
            fires.append(fire)
            fire = next_fire_after(obj.expression, check_timezone(obj.timezone), fire)
        return fires

    def _in_zone(self, obj: CronSchedule, moment: dt.datetime) -> str:
        """A fire in the schedule's own time zone, the zone named."""
        local = moment.astimezone(check_timezone(obj.timezone))
        return f"{local:%Y-%m-%d %H:%M %Z} ({obj.timezone})"

    @admin.display(description="next fire")
    def next_fire(self, obj: CronSchedule) -> str:
        if obj.paused:
            return "none while paused"
        fires = self._fires(obj, 1)
        return self._in_zone(obj, fires[0]) if fires else "-"

    @admin.display(description="next fires")
    def next_fires(self, obj: CronSchedule) -> SafeString:
        fires = self._fires(obj, NEXT_FIRES)
        if not fires:
            return format_html(
                '<span class="awa-muted">{}</span>', "none: the definition cannot be evaluated"
            )
        note = " (none while paused; these once resumed)" if obj.paused else ""
        items = format_html_join("", "<li>{}</li>", ((self._in_zone(obj, f),) for f in fires))
        return format_html('<ol class="awa-fires" id="awa-next-fires">{}</ol>{}', items, note)

    @admin.display(description="last job")
    def last_job(self, obj: CronSchedule) -> str:
        if obj.last_job_id is None:
            return "-"
        url = reverse(f"{self.admin_site.name}:awa_django_job_change", args=[obj.last_job_id])
        return format_html('<a href="{}" class="awa-last-job">#{}</a>', url, obj.last_job_id)

    @admin.display(description="args")
    def args_pretty(self, obj: CronSchedule) -> SafeString:
        return detail.json_block(obj.args)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: CronSchedule) -> SafeString:
        return detail.json_block(obj.metadata)

    # -- actions (through the Client) ---------------------------------------------------
    @admin.action(permissions=[MANAGE], description="Pause selected schedules")
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        by = request.user.get_username()
        self._each(request, queryset, "paused", lambda c, n: c.pause_schedule(n, by=by))

    @admin.action(permissions=[MANAGE], description="Resume selected schedules")
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._each(request, queryset, "resumed", lambda c, n: c.resume_schedule(n))

    @admin.action(permissions=[MANAGE], description="Trigger selected schedules now")
    def trigger_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._each(request, queryset, "triggered", lambda c, n: c.trigger_schedule(n))

    @admin.action(permissions=[MANAGE], description="Remove selected schedules")
    def remove_schedules(self, request: HttpRequest, queryset: QuerySet[CronSchedule]) -> None:
        self._each(request, queryset, "removed", lambda c, n: c.remove_schedule(n))

    def _each(
        self, request: HttpRequest, queryset: QuerySet[CronSchedule], verb: str, act: Any
    ) -> None:
        client = Client(router.db_for_write(CronSchedule))
        done = 0
        for name in queryset.values_list("name", flat=True):
            try:
                act(client, name)
                done += 1
            except ScheduleNotFound:
                pass  # removed meanwhile
        noun = "schedule" if done == 1 else "schedules"
        messages.success(request, f"{done} {noun} {verb}")

    # -- permissions: read-only rows, the actions need manage_schedule -----------------
    def has_manage_schedule_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{MANAGE}")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # removal is the "Remove selected schedules" action (the Client)
