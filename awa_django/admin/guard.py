"""The one guard in front of every admin page of the package (docs/admin.md, "Query
string"): a list runs only the query-string parameters its filters declare, and no page
lets a value PostgreSQL cannot take (a NUL, a lone surrogate) reach a query, whether it
comes in the query string, the path or an action's selection.

Whatever it refuses is Django's `DisallowedModelAdminLookup`, a SuspiciousOperation: the
same 400 page everywhere (the site's `handler400`), logged on `django.security.*`, and
raised before any query runs. Every ModelAdmin of the package inherits `AdminGuard`
(tests/integration/test_admin_guard.py fails for one that does not)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.contrib.admin import FieldListFilter, SimpleListFilter
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import get_fields_from_path
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern

from awa_django.codec import unstorable_character

# On the request: each admin's filter parameters, worked out once per request.
_CACHE = "_awa_filter_parameters"
GUARDED = "awa_guarded"  # set on every view the guard wraps

# ModelAdmin is generic in django-stubs only; Django's class cannot be subscripted at runtime.
if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    _Base = ModelAdmin[Any]
else:
    _Base = object


def refuse(reason: str) -> DisallowedModelAdminLookup:
    return DisallowedModelAdminLookup(reason)


def check_texts(what: str, values: Iterable[object]) -> None:
    """Refuse (400) any value that no column can hold: PostgreSQL would fail the query."""
    for value in values:
        if isinstance(value, str) and (problem := unstorable_character(value)):
            raise refuse(f"{what} {value!a:.60} contains {problem}")


def filter_parameters(model_admin: Any, request: HttpRequest) -> frozenset[str]:
    """The query-string parameters of `model_admin`'s list filters: the ones their links
    use. A `__isnull` parameter counts only for a nullable field (on another it is a scan
    that finds nothing)."""
    cache: dict[int, frozenset[str]] = request.__dict__.setdefault(_CACHE, {})
    if id(model_admin) not in cache:
        names: set[str] = set()
        for entry in model_admin.get_list_filter(request):
            names.update(_parameters_of(entry, model_admin, request))
        if model_admin.date_hierarchy:
            names.update(f"{model_admin.date_hierarchy}__{p}" for p in ("year", "month", "day"))
        cache[id(model_admin)] = frozenset(names)
    return cache[id(model_admin)]


def _parameters_of(entry: Any, model_admin: Any, request: HttpRequest) -> list[str]:
    if isinstance(entry, type) and issubclass(entry, SimpleListFilter):
        # Read off the class: building one would run its lookups (a query, for some).
        return [str(entry.parameter_name)]
    path, make = entry if isinstance(entry, list | tuple) else (entry, FieldListFilter.create)
    field = get_fields_from_path(model_admin.model, path)[-1]
    spec = make(field, request, {}, model_admin.model, model_admin, field_path=path)
    return [p for p in spec.expected_parameters() if field.null or not p.endswith("__isnull")]


def check_request(model_admin: Any, request: HttpRequest, path_values: Iterable[object]) -> None:
    """What every page of `model_admin` refuses before it runs: unstorable text in the
    query string (names and values) or the path, and an action selection that names no
    possible row."""
    check_texts("query-string parameter", request.GET.keys())
    check_texts("query-string value", (v for _, values in request.GET.lists() for v in values))
    check_texts("path segment", path_values)
    if request.method == "POST":
        _check_selection(model_admin, request.POST.getlist(ACTION_CHECKBOX_NAME))


def _check_selection(model_admin: Any, selected: list[str]) -> None:
    """Django filters `pk__in=<selection>` without converting it first: a value that is
    not a primary key would fail in the driver or the database."""
    check_texts("selected row", selected)
    field = model_admin.model._meta.pk
    for value in selected:
        try:
            field.to_python(value)
        except ValidationError:
            raise refuse(f"selected row {value!a:.60} is not a {field.name}") from None


def guarded(model_admin: Any, view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @functools.wraps(view)
    def guarded_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        check_request(model_admin, request, [*args, *kwargs.values()])
        return view(request, *args, **kwargs)

    setattr(guarded_view, GUARDED, True)
    return guarded_view


class AdminGuard(_Base):
    """For every ModelAdmin of the package, first among its bases: each of its URLs (lists,
    detail, history, delete, add, and any custom view its get_urls adds) goes through
    `check_request`, and its list accepts only the parameters its filters declare, plus
    Django's own (page, order, search, all, popup, facets)."""

    @property
    def urls(self) -> list[URLPattern]:
        patterns = []
        for pattern in self.get_urls():
            callback = guarded(self, pattern.callback)
            patterns.append(
                URLPattern(pattern.pattern, callback, pattern.default_args, pattern.name)
            )
        return patterns

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the declared filters, with values PostgreSQL can compare. Django calls this
        for every other parameter of the list's query string and answers 400 to a
        refusal, before any query runs."""
        declared = lookup in filter_parameters(self, request)
        return declared and unstorable_character(str(value)) is None
