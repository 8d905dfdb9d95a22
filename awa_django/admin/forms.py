"""Forms of the job admin: the intermediate pages of the callback actions and the
dashboard's queue buttons."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from awa_django.conf import validate_queue_name
from awa_django.exceptions import AwaError
from awa_django.keys import MAX_IN_FLIGHT
from awa_django.options import check_kind

MAX_ERROR_CHARS = 2000


class PayloadField(forms.JSONField):
    """A JSON field whose empty value shows as an empty box, not as `null`."""

    def prepare_value(self, value: Any) -> Any:
        return "" if value is None else super().prepare_value(value)


class CompleteCallbackForm(forms.Form):
    """Payload handed to `Client.complete_external` (any JSON value; empty means none)."""

    payload = PayloadField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80}),
        help_text='Optional JSON value passed as the callback payload, e.g. {"ok": true}.',
    )


class FailCallbackForm(forms.Form):
    """Error text recorded on the job by `Client.fail_external`."""

    error = forms.CharField(
        max_length=MAX_ERROR_CHARS,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        help_text="Recorded in the job's error history; the job becomes failed.",
    )


class CheckedNameField(forms.CharField):
    """A queue name or kind checked by the library's own validator, whose typed error
    becomes the form's error: the admin accepts exactly what the client accepts."""

    def __init__(self, check: Callable[[str], str], **kwargs: Any) -> None:
        super().__init__(max_length=200, **kwargs)
        self.check = check

    def clean(self, value: Any) -> str:
        cleaned: str = super().clean(value)
        try:
            return self.check(cleaned)
        except AwaError as exc:
            raise ValidationError(str(exc)) from exc


class QueueOperationForm(forms.Form):
    """A pause or resume button of the dashboard."""

    queue = CheckedNameField(validate_queue_name)
    operation = forms.ChoiceField(choices=[("pause", "pause"), ("resume", "resume")])


class RateLimitForm(forms.Form):
    """What the runtime-limit forms share: "set" or "clear", and an optional rate with
    an optional burst."""

    operation = forms.ChoiceField(choices=[("set", "set"), ("clear", "clear")])
    rate = forms.FloatField(required=False, min_value=0.001, help_text="jobs per second")
    burst = forms.IntegerField(required=False, min_value=1)

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        if data.get("burst") is not None and data.get("rate") is None:
            raise ValidationError("A burst needs a rate.")
        return data

    def rate_limit(self) -> tuple[float, int] | float | None:
        """(rate, burst), a bare rate (burst derived from it), or None."""
        rate, burst = self.cleaned_data.get("rate"), self.cleaned_data.get("burst")
        if rate is None:
            return None
        return rate if burst is None else (rate, burst)


class QueueLimitsForm(RateLimitForm):
    """The dashboard's runtime limits of one queue (Client.set_queue_limits); blank fields
    are not overridden, "clear" drops every override."""

    queue = CheckedNameField(validate_queue_name)
    concurrency = forms.IntegerField(required=False, min_value=1)


class KeyLimitsForm(RateLimitForm):
    """The keys page's runtime per-key limits of one kind (Client.set_key_limits); a blank
    field keeps the declared value, "clear" drops the kind's override."""

    kind = CheckedNameField(check_kind, strip=False)
    max_in_flight = forms.IntegerField(required=False, min_value=1, max_value=MAX_IN_FLIGHT)
