"""URLconf for signed callback requests: include("awa_django.urls") under a prefix."""

from __future__ import annotations

from django.urls import URLPattern

app_name = "awa_django"
urlpatterns: list[URLPattern] = []
