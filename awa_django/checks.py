"""System checks for configuration mistakes (DESIGN §8)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from .conf import load_settings


@checks.register(checks.Tags.database, deploy=False)
def check_postgresql(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    alias = getattr(settings, "AWA", {}).get("DATABASE", "default")
    if alias not in connections.databases:
        return [
            checks.Error(f'AWA["DATABASE"] names unknown database alias {alias!r}.', id="awa.E001")
        ]
    if connections[alias].vendor != "postgresql":
        return [
            checks.Error(
                "awa-django needs PostgreSQL.",
                hint=f"DATABASES[{alias!r}] uses {connections[alias].vendor}.",
                id="awa.E002",
            )
        ]
    return []


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        awa = load_settings()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="awa.E003")]
    problems: list[checks.CheckMessage] = []
    if awa.heartbeat_staleness < 3 * awa.heartbeat_interval:
        problems.append(
            checks.Warning(
                "AWA HEARTBEAT_STALENESS should be at least 3 x HEARTBEAT_INTERVAL, or live "
                "attempts may be rescued while their worker is merely slow.",
                id="awa.W001",
            )
        )
    if awa.leader_ttl <= 0 or awa.poll_interval <= 0:
        problems.append(
            checks.Error("AWA LEADER_TTL and POLL_INTERVAL must be > 0.", id="awa.E004")
        )
    return problems
