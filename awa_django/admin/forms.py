"""Forms of the job admin: the intermediate pages of the callback actions and the
dashboard's queue buttons."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from awa_django.conf import validate_queue_name
from awa_django.exceptions import AwaError, InvalidQueueName
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


class QueueOperationForm(forms.Form):
    """A pause or resume button of the dashboard."""

    queue = forms.CharField(max_length=200)
    operation = forms.ChoiceField(choices=[("pause", "pause"), ("resume", "resume")])

    def clean_queue(self) -> str:
        queue: Any = self.cleaned_data["queue"]
        try:
            return validate_queue_name(queue)
        except InvalidQueueName as exc:
            raise ValidationError(str(exc)) from exc


class QueueLimitsForm(forms.Form):
    """The dashboard's runtime limits of one queue (Client.set_queue_limits); blank fields
    are not overridden, "clear" drops every override."""

    queue = forms.CharField(max_length=200)
    operation = forms.ChoiceField(choices=[("set", "set"), ("clear", "clear")])
    concurrency = forms.IntegerField(required=False, min_value=1)
    rate = forms.FloatField(required=False, min_value=0.001, help_text="jobs per second")
    burst = forms.IntegerField(required=False, min_value=1)

    def clean_queue(self) -> str:
        queue: Any = self.cleaned_data["queue"]
        try:
            return validate_queue_name(queue)
        except InvalidQueueName as exc:
            raise ValidationError(str(exc)) from exc

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


class KeyLimitsForm(forms.Form):
    """The keys page's runtime per-key limits of one kind (Client.set_key_limits); a blank
    field keeps the declared value, "clear" drops the kind's override."""

    kind = forms.CharField(max_length=200, strip=False)
    operation = forms.ChoiceField(choices=[("set", "set"), ("clear", "clear")])
    max_in_flight = forms.IntegerField(required=False, min_value=1, max_value=MAX_IN_FLIGHT)
    rate = forms.FloatField(required=False, min_value=0.001, help_text="jobs per second")
    burst = forms.IntegerField(required=False, min_value=1)

    def clean_kind(self) -> str:
        kind: Any = self.cleaned_data["kind"]
        try:
            return check_kind(kind)
        except AwaError as exc:
            raise ValidationError(str(exc)) from exc

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
