"""App config of the demo shop: registers its lifecycle hooks at startup."""

from __future__ import annotations

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "testproject.shop"
    label = "shop"

    def ready(self) -> None:
        from . import hooks

        hooks.register()
