"""The one guard in front of every admin page of the package (docs/admin.md, "Query
string"): a list runs only the query-string parameters its filters declare, and no page
lets a value PostgreSQL cannot take (a NUL, a lone surrogate) reach a query, whether it
comes in the query string, the path or an action's selection. And an action over "all N"
matching the filter (Django's select-across) runs only after a confirmation page.

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
from django.template.response import TemplateResponse
from django.urls import URLPattern

from awa_django.codec import unstorable_character
from awa_django.options import MAX_JOB_ID

# On the request: each admin's filter parameters, worked out once per request.
_CACHE = "_awa_filter_parameters"
GUARDED = "awa_guarded"  # set on every view the guard wraps
CONFIRMS_ACROSS = "awa_confirms_across"  # an action that shows its own confirmation
CONFIRMED = "apply_all"  # posted by a confirmation page of "all N"

# ModelAdmin is generic in django-stubs only; Django's class cannot be subscripted at runtime.
if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    _Base = ModelAdmin[Any]
else:
    _Base = object


def check_texts(what: str, values: Iterable[object]) -> None:
    """Refuse (400) any value that no column can hold: PostgreSQL would fail the query."""
    for value in values:
        if isinstance(value, str) and (problem := unstorable_character(value)):
            raise DisallowedModelAdminLookup(f"{what} {value!a:.60} contains {problem}")


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
    query string (names and values) or the path, a path number beyond a bigint, and an
    action selection that names no possible row."""
    check_texts("query-string parameter", request.GET.keys())
    check_texts("query-string value", (v for _, values in request.GET.lists() for v in values))
    path_values = list(path_values)
    check_texts("path segment", path_values)
    check_ids(path_values)
    if request.method == "POST":
        _check_selection(model_admin, request.POST.getlist(ACTION_CHECKBOX_NAME))


def check_ids(path_values: Iterable[object]) -> None:
    """Refuse (400) a path number no bigint can hold (Django's `<int:...>` converter takes
    any number of digits): every view behind such a segment would otherwise hand it to a
    query or a Client check of its own, and the driver cannot send it."""
    for value in path_values:
        if isinstance(value, int) and not 0 <= value <= MAX_JOB_ID:
            raise DisallowedModelAdminLookup("path number beyond a bigint")


def _check_selection(model_admin: Any, selected: list[str]) -> None:
    """Django filters `pk__in=<selection>` without converting it first: a value that is
    not a primary key would fail in the driver or the database."""
    check_texts("selected row", selected)
    field = model_admin.model._meta.pk
    for value in selected:
        try:
            field.to_python(value)
        except ValidationError:
            raise DisallowedModelAdminLookup(
                f"selected row {value!a:.60} is not a {field.name}"
            ) from None


def guarded(model_admin: Any, view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @functools.wraps(view)
    def guarded_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        check_request(model_admin, request, [*args, *kwargs.values()])
        return view(request, *args, **kwargs)

    setattr(guarded_view, GUARDED, True)
    return guarded_view


def confirms_select_across[F: Callable[..., Any]](action: F) -> F:
    """Mark an admin action that asks before acting on "all N" itself (a confirmation or
    form page of its own): the guard's generic confirmation page is then not shown."""
    setattr(action, CONFIRMS_ACROSS, True)
    return action


def _chosen_action(model_admin: Any, request: HttpRequest) -> tuple[str, Any, str] | None:
    """The action the posted form names: (name, function, description), or None."""
    names = request.POST.getlist("action")
    index = request.POST.get("index", "0")
    name = names[int(index)] if index.isdigit() and int(index) < len(names) else None
    entry = model_admin.get_actions(request).get(name) if name else None
    if not name or entry is None:
        return None
    # Django 6.1 gives an Action with attributes; 5.2 a (func, name, description) tuple.
    if isinstance(entry, tuple):
        return name, entry[0], str(entry[2])
    return name, entry.func, str(entry.description)


def confirm_across(
    model_admin: Any, request: HttpRequest, queryset: Any, action: tuple[str, Any, str]
) -> TemplateResponse:
    """The page between "all N" and the action: the count, and a button that posts the same
    action again with `apply_all`."""
    name, _, description = action
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Confirm: {description}",
        "opts": opts,
        "total": queryset.count(),
        "description": description,
        "action": name,
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
        # Django runs an action only with a selection; select_across widens it.
        "selected": request.POST.getlist(ACTION_CHECKBOX_NAME)[:1],
        "query_string": request.GET.urlencode(),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/awa_django/confirm_across.html", context)


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

    # Django 6.1 adds an `action_location` argument; passed through as it comes.
    def response_action(
        self, request: HttpRequest, queryset: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """Django runs an action over the whole filtered list at once when "select all" is
        used; here it first asks, unless the action asks itself."""
        across = request.POST.get("select_across") == "1" and CONFIRMED not in request.POST
        action = _chosen_action(self, request) if across else None
        if action is not None and not getattr(action[1], CONFIRMS_ACROSS, False):
            return confirm_across(self, request, queryset, action)
        return super().response_action(request, queryset, *args, **kwargs)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the declared filters, with values PostgreSQL can compare. Django calls this
        for every other parameter of the list's query string and answers 400 to a
        refusal, before any query runs."""
        declared = lookup in filter_parameters(self, request)
        return declared and unstorable_character(str(value)) is None
