"""The documented `TASKS` backend path, `awa_django.backends.AwaBackend`; the integration
lives in `awa_django.tasks`."""

from awa_django.tasks.backend import AwaBackend

__all__ = ["AwaBackend"]
