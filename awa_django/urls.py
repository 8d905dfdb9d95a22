"""The documented URLconf, `include("awa_django.urls")`; the views live in `awa_django.web`."""

from awa_django.web.urls import app_name, urlpatterns

__all__ = ["app_name", "urlpatterns"]
