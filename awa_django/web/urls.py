"""URLconf for signed callback requests: `path("awa/callbacks/", include("awa_django.urls"))`
gives POST <prefix><callback_id>/complete|fail|retry|heartbeat (docs/callbacks.md).

The callback id is routed as a plain string and validated by the view, so a malformed id
is a 400 that says so rather than an unexplained 404.
"""

from __future__ import annotations

from django.urls import URLPattern, path

from awa_django.web.signing import ACTIONS
from awa_django.web.views import resolve_callback

app_name = "awa_django"
urlpatterns: list[URLPattern] = [
    path(
        f"<str:callback_id>/{action}",
        resolve_callback,
        {"action": action},
        name=f"callback_{action}",
    )
    for action in ACTIONS
]
