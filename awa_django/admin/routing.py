"""Which database the admin reads from (decision 020).

Pages (GET) read from `AWA["READ_DATABASE"]`, a replica, when one is set. Everything an
operator does — actions, deletes, pause/resume — reads and writes the primary, and so does
the first page after it (the redirect), so what they see right after acting is what they
did, not the replica's lag. Without READ_DATABASE everything uses the primary, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import router
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse

from awa_django.conf import awa_settings

# In the session: the next page this operator loads reads the primary.
PIN_KEY = "awa_read_primary"
_CHOSEN = "_awa_read_alias"  # on the request: the alias chosen for it, once
_SAFE_METHODS = ("GET", "HEAD")


def primary(model: type[Model]) -> str:
    """The alias the admin writes `model` to (Django's router; AWA["DATABASE"] by default)."""
    return router.db_for_write(model)


def read_alias(request: HttpRequest, model: type[Model]) -> str:
    """The alias this request reads `model` from: the replica for a plain page view, the
    primary for a form post or the first page after one. Chosen once per request."""
    chosen: str | None = getattr(request, _CHOSEN, None)
    if chosen is None:
        chosen = _choose(request, model)
        setattr(request, _CHOSEN, chosen)
    return chosen


def _choose(request: HttpRequest, model: type[Model]) -> str:
    replica = awa_settings().read_database
    session = getattr(request, "session", None)
    pinned = session is not None and session.pop(PIN_KEY, False)
    if replica is None or pinned or request.method not in _SAFE_METHODS:
        return primary(model)
    return replica


def pin_primary(request: HttpRequest) -> None:
    """After a change: the next page this operator loads reads the primary."""
    session = getattr(request, "session", None)
    if session is not None and awa_settings().read_database is not None:
        session[PIN_KEY] = True


# ModelAdmin is generic in django-stubs only; Django's class cannot be subscripted at runtime.
if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    _Base = ModelAdmin[Any]
else:
    _Base = object


class ReplicaReadsMixin(_Base):
    """For a ModelAdmin: lists and detail pages read `read_alias`; actions and deletes
    pin the next page to the primary."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)
        return queryset.using(read_alias(request, self.model))

    # Django 6.1 adds an `action_location` argument; passed through as it comes.
    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> Any:
        pin_primary(request)
        return super().response_action(request, queryset, *args, **kwargs)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST":
            pin_primary(request)
        return super().delete_view(request, object_id, extra_context)
