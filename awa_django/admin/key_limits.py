"""The concurrency keys page of the admin (decision 045): each keyed kind with its declared
and overridden per-key limits and its busiest keys, and the form that sets or clears a
kind's override through the Client (`Client.set_key_limits` / `clear_key_limits`), under
the permission of the queue limits form (`awa_django.set_queue_limits`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from awa_django.admin.forms import KeyLimitsForm
from awa_django.admin.limits import LIMITS_PERMISSION, posted_limits
from awa_django.admin.routing import read_alias
from awa_django.client import Client
from awa_django.conf import awa_settings
from awa_django.exceptions import InvalidKeyLimits
from awa_django.limits import RateLimit
from awa_django.registry import registry
from awa_django.snapshot import KeyFigures

KEYS_PER_KIND = 5


@dataclass(frozen=True, slots=True)
class KindRow:
    """One keyed kind as the page shows it. `declared` is what this process's registry and
    settings say (None: the kind is not registered here, only overridden)."""

    kind: str
    declared: str | None
    override: str | None
    updated_by: str
    keys: list[KeyFigures]


def keys_view(model_admin: Any, request: HttpRequest) -> TemplateResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    client = Client(read_alias(request, model_admin.model))
    overrides = client.key_overrides()
    declared = _declared_limits()
    kinds = sorted(set(declared) | set(overrides))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Concurrency keys",
        "opts": model_admin.model._meta,
        "kinds": [
            _kind_row(kind, declared.get(kind), overrides.get(kind), client) for kind in kinds
        ],
        "can_set_limits": request.user.has_perm(LIMITS_PERMISSION),
        "key_limits_url": reverse(f"{model_admin.admin_site.name}:awa_django_key_limits"),
        "dashboard_url": reverse(f"{model_admin.admin_site.name}:awa_django_dashboard"),
        "changelist_url": reverse(f"{model_admin.admin_site.name}:awa_django_job_changelist"),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/awa_django/keys.html", context)


def key_limits_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """Set or clear one kind's per-key override (POST from the keys page's form)."""

    def change(client: Client, form: Any, by: str) -> str:
        kind = form.cleaned_data["kind"]
        if form.cleaned_data["operation"] == "clear":
            client.clear_key_limits(kind)
            return f"Kind {kind}: key overrides cleared, its declared limits apply."
        client.set_key_limits(
            kind,
            max_in_flight=form.cleaned_data["max_in_flight"],
            rate_limit=form.rate_limit(),
            by=by,
        )
        return (
            f"Kind {kind}: new key limits apply to its next admissions; jobs already "
            "admitted keep their slots."
        )

    form = KeyLimitsForm(request.POST)
    return posted_limits(
        model_admin, request, form, "awa_django_keys", "Key limits", change, InvalidKeyLimits
    )


def _declared_limits() -> dict[str, str]:
    """{kind: its per-key limits as declared} for the keyed kinds registered here: the
    `@job` values, else its queue's defaults (QueueConfig.key_limits)."""
    settings = awa_settings()
    declared = {}
    for definition in registry.jobs():
        if definition.concurrency_key is None:
            continue
        limits = settings.queue(definition.queue).key_limits(
            definition.max_in_flight, definition.key_rate_limit
        )
        declared[definition.kind] = describe(
            limits.max_in_flight, limits.rate_limit, unset_rate="no rate limit"
        )
    return declared


def _kind_row(kind: str, declared: str | None, override: Any, client: Client) -> KindRow:
    """`override` is the kind's KeyLimit row (Client.key_overrides), or None."""
    shown = None
    if override is not None:
        rate = None if override.rate is None else RateLimit(override.rate, override.burst or 1)
        shown = describe(override.max_in_flight, rate)
    return KindRow(
        kind=kind,
        declared=declared,
        override=shown,
        updated_by=override.updated_by if override is not None else "",
        keys=client.busiest_keys(KEYS_PER_KIND, kind=kind),
    )


def describe(
    max_in_flight: int | None, rate: RateLimit | None, *, unset_rate: str = "rate declared"
) -> str:
    """'max 3 in flight, 2/s (burst 4)'. An override's part left unset reads 'declared'
    (the declaration applies); a declaration without a rate says `unset_rate`."""
    cap = "max declared" if max_in_flight is None else f"max {max_in_flight} in flight"
    pace = unset_rate if rate is None else f"{rate.rate:g}/s (burst {rate.burst:g})"
    return f"{cap}, {pace}"
