"""List filters of the job admin whose choices never scan the jobs table.

A `SELECT DISTINCT kind` over millions of rows would run on every list page, so the
choices come from what the process already knows: registered job definitions and, for
queues, `Client.known_queues()` (configured, declared, or paused once), plus the value
currently filtered on, so a link to an unlisted kind or queue still shows as selected.
Filtering itself uses the kind and queue indexes; the job list spells its queue filter
so that the partial queue index can serve it (admin/jobs.py, `JobQueueFilter`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from awa_django.admin.routing import read_alias
from awa_django.client import Client
from awa_django.registry import registry


class _ExactValueFilter(admin.SimpleListFilter):
    """Filters on `field = value`; subclasses say where the choices come from."""

    field: str

    def known_values(self, request: HttpRequest, model_admin: Any) -> set[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = self.known_values(request, model_admin)
        if self.value():
            values.add(str(self.value()))
        return [(v, v) for v in sorted(values)]

    def match(self, value: str) -> Q:
        return Q(**{self.field: value})

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(self.match(str(self.value())))
        return queryset


class QueueFilter(_ExactValueFilter):
    title = "queue"
    parameter_name = "queue"
    field = "queue"

    def known_values(self, request: HttpRequest, model_admin: Any) -> set[str]:
        return Client(read_alias(request, model_admin.model)).known_queues()


class KindFilter(_ExactValueFilter):
    title = "kind"
    parameter_name = "kind"
    field = "kind"

    def known_values(self, request: HttpRequest, model_admin: Any) -> set[str]:
        return {d.kind for d in registry.jobs()}
