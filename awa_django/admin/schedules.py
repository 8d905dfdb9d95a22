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
from django.utils.html import format_html

from awa_django.admin.guard import AdminGuard
from awa_django.admin.routing import ReplicaReadsMixin
from awa_django.client import Client
from awa_django.cron import upcoming_fire
from awa_django.exceptions import ScheduleNotFound
from awa_django.storage.models import CronSchedule

MANAGE = "manage_schedule"

# Django's ModelAdmin takes no type argument at runtime; the stubs want one (as in jobs.py).
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[CronSchedule]
else:
    _ModelAdmin = admin.ModelAdmin


class CronScheduleAdmin(AdminGuard, ReplicaReadsMixin, _ModelAdmin):
    list_display = (
        "name",
        "kind",
        "expression",
        "timezone",
        "missed_fire_policy",
        "paused",
        "last_fire_at",
        "next_fire",
        "last_job",
    )
    list_filter = ("paused", "missed_fire_policy")
    search_fields = ("name", "kind")
    readonly_fields = [f.name for f in CronSchedule._meta.fields]
    actions = ["pause_schedules", "resume_schedules", "trigger_schedules", "remove_schedules"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[CronSchedule]:
        # The database clock, read with the rows, is what the next fire is computed from.
        queryset: QuerySet[CronSchedule] = super().get_queryset(request)
        return queryset.annotate(db_now=Now())

    @admin.display(description="next fire")
    def next_fire(self, obj: CronSchedule) -> dt.datetime | str:
        if obj.paused:
            return "paused"
        now = getattr(obj, "db_now", None) or obj.updated_at
        upcoming = upcoming_fire(
            obj.expression,
            obj.timezone,
            obj.missed_fire_policy,
            obj.last_fire_at,
            obj.created_at,
            now,
        )
        return upcoming or "-"

    @admin.display(description="last job")
    def last_job(self, obj: CronSchedule) -> str:
        if obj.last_job_id is None:
            return "-"
        url = reverse(f"{self.admin_site.name}:awa_django_job_change", args=[obj.last_job_id])
        return format_html('<a href="{}">#{}</a>', url, obj.last_job_id)

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
