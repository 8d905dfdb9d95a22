"""System checks for how awa-django is wired into a project: the apps it needs, Django's
task framework for `AwaBackend`, and the database aliases it reads from (READ_DATABASE) and
listens on (LISTEN_DATABASE). Registered by `AwaConfig.ready()`; decisions 019 and 020."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from awa_django.conf import load_settings
from awa_django.tasks import AVAILABLE, MISSING

# INSTALLED_APPS as the README's install section writes it.
POSTGRES_APP = "django.contrib.postgres"


@checks.register()
def check_postgres_app(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """awa_django's models use ArrayField and GinIndex, which need django.contrib.postgres
    (Django 6.0+ refuses to migrate without it: postgres.E005)."""
    if apps.is_installed(POSTGRES_APP):
        return []
    return [
        checks.Error(
            f"awa_django needs {POSTGRES_APP!r} in INSTALLED_APPS (its job table uses "
            "ArrayField and GinIndex).",
            hint=f'Add it before awa_django: INSTALLED_APPS += ["{POSTGRES_APP}", "awa_django"]',
            id="awa.E030",
        )
    ]


@checks.register()
def check_task_framework(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """TASKS names AwaBackend on a Django without django.tasks and without the backport:
    Django 5.2 would ignore TASKS silently and every @task would be missing."""
    return task_framework_problems(AVAILABLE, getattr(settings, "TASKS", None) or {})


def task_framework_problems(available: bool, tasks: dict[str, Any]) -> list[checks.CheckMessage]:
    if available:
        return []
    named = [
        alias
        for alias, params in tasks.items()
        if str((params or {}).get("BACKEND", "")).startswith("awa_django.")
    ]
    if not named:
        return []
    return [checks.Error(f"TASKS[{named[0]!r}] uses AwaBackend. {MISSING}", id="awa.E031")]


@checks.register(checks.Tags.database, deploy=False)
def check_aliases(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """READ_DATABASE must name an alias; LISTEN_DATABASE an alias or DSN reaching
    PostgreSQL directly (not through a transaction pooler)."""
    try:
        awa = load_settings()
    except ImproperlyConfigured:
        return []  # awa.E003 reports it
    problems: list[checks.CheckMessage] = []
    if awa.read_database is not None and awa.read_database not in connections.databases:
        problems.append(
            checks.Error(
                f'AWA["READ_DATABASE"] names unknown database alias {awa.read_database!r}.',
                hint="Name an alias of DATABASES (a replica of AWA['DATABASE']).",
                id="awa.E032",
            )
        )
    if awa.database in connections.databases:
        from awa_django.worker.database import listen_kwargs

        try:
            listen_kwargs(awa.listen_database, awa.database, "awa check")
        except ImproperlyConfigured as exc:
            problems.append(checks.Error(str(exc), id="awa.E033"))
    return problems
