"""App config: autodiscovers each installed app's `jobs` module and registers checks."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class AwaConfig(AppConfig):
    name = "awa_django"
    verbose_name = "Awa job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        autodiscover_modules("jobs")
        from awa_django import checks, setup_checks  # noqa: F401  (registers the checks)
        from awa_django.tasks import AVAILABLE

        if AVAILABLE:  # Django 6.0+, or 5.2 with the django-tasks backport
            from awa_django.tasks.backend import install as install_task_backend

            # The django.tasks resolver and signal hook; a no-op unless TASKS uses AwaBackend.
            install_task_backend()
