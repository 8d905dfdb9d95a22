"""The buttons of a detail page. Each one POSTs to `<id>/act/<action>/`, which runs the
change list's own admin action on that one object: the same permission check (Django's
`get_actions` drops the actions the user may not run), the same CSRF protection (the admin
view wrapper), the same Client verb and the same result message. Then back to the page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, path, reverse

from awa_django.admin.routing import pin_primary


@dataclass(frozen=True, slots=True)
class Button:
    """One button: the admin action it runs, its label, and the fields posted with it (the
    payload of a callback completion, the error of a callback failure)."""

    action: str
    label: str
    form: forms.Form | None = None
    danger: bool = False
    fields: dict[str, str] = field(default_factory=dict)  # hidden inputs


# ModelAdmin is generic in django-stubs only; Django's class cannot be subscripted at runtime.
if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    _Base = ModelAdmin[Any]
else:
    _Base = object


class ObjectActionsMixin(_Base):
    """For a ModelAdmin: `object_buttons(obj)` says which actions apply in the object's
    state; the detail page shows those the user may run, each as a POST form."""

    change_form_template = "admin/awa_django/change_form.html"

    def object_buttons(self, obj: Any) -> list[Button]:
        return []

    def object_action_view(
        self, request: HttpRequest, object_id: str, action: str
    ) -> HttpResponseBase:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        # Django's get_actions leaves out the actions this user lacks the permission for.
        entry: Any = self.get_actions(request).get(action)
        if entry is None:
            raise PermissionDenied
        obj = self.get_object(request, object_id)
        if obj is None:
            raise Http404(f"No {self.opts.verbose_name} with id {object_id!r}.")
        pin_primary(request)
        # Django 6.1 gives an Action with `.func`; earlier versions a (func, name, text) tuple.
        func = entry.func if hasattr(entry, "func") else entry[0]
        response: HttpResponseBase | None = func(
            self, request, self.get_queryset(request).filter(pk=obj.pk)
        )
        # A form that did not validate (a callback payload that is not JSON) comes back
        # as the action's own form page, with the errors, posting here again.
        return response or HttpResponseRedirect(self.after_action_url(request, obj, action))

    def after_action_url(self, request: HttpRequest, obj: Any, action: str) -> str:
        """The object's page again; the list when the action removed the object."""
        info = (self.admin_site.name, self.opts.app_label, self.opts.model_name)
        if not self.get_queryset(request).filter(pk=obj.pk).exists():
            return reverse("{}:{}_{}_changelist".format(*info))
        return reverse("{}:{}_{}_change".format(*info), args=[quote(obj.pk)])

    def visible_buttons(self, request: HttpRequest, obj: Any) -> list[dict[str, Any]]:
        allowed = self.get_actions(request)
        info = (self.admin_site.name, self.opts.app_label, self.opts.model_name)
        return [
            {
                "button": button,
                "url": reverse("{}:{}_{}_act".format(*info), args=[quote(obj.pk), button.action]),
            }
            for button in self.object_buttons(obj)
            if button.action in allowed
        ]

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        context["awa_object_buttons"] = self.visible_buttons(request, obj) if obj else []
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        info = (self.opts.app_label, self.opts.model_name)
        own = [
            path(
                "<path:object_id>/act/<str:action>/",
                self.admin_site.admin_view(self.object_action_view),
                name="{}_{}_act".format(*info),
            )
        ]
        return own + super().get_urls()
