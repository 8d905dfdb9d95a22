"""System checks for configuration mistakes (DESIGN §8), and deploy checks
(`manage.py check --deploy`) for settings only fit for development."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import import_string

from awa_django.conf import load_settings
from awa_django.cron import check_expression, check_timezone
from awa_django.exceptions import InvalidSchedule
from awa_django.registry import Registry, registry


@checks.register(checks.Tags.database, deploy=False)
def check_postgresql(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    alias = (getattr(settings, "AWA", None) or {}).get("DATABASE", "default")
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
    if awa.leader_ttl <= 0 or awa.poll_interval <= 0 or awa.standby_poll_interval <= 0:
        problems.append(
            checks.Error(
                "AWA LEADER_TTL, POLL_INTERVAL and STANDBY_POLL_INTERVAL must be > 0.",
                id="awa.E004",
            )
        )
    return problems


# Secrets published in this project's example settings and docs: anyone can read them, so
# a deployment that kept one accepts requests that anyone can sign.
EXAMPLE_CALLBACK_SECRETS = frozenset(
    {
        "awa-django-demo-callback-secret-do-not-deploy",  # testproject/settings.py default
        "dev-callback-secret-change-me",  # its earlier default
    }
)
MIN_CALLBACK_SECRET_BYTES = 32


@checks.register(checks.Tags.security)
def check_callback_secret(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        awa = load_settings()
    except ImproperlyConfigured:
        return []  # awa.E003 reports it
    problems: list[checks.CheckMessage] = []
    if not (awa.callback_secrets or awa.callback_allow_unsigned):
        problems.append(_no_secret_while_debugging() if settings.DEBUG else _no_secret())
    if awa.callback_allow_unsigned and not settings.DEBUG:
        problems.append(
            checks.Error(
                'AWA["CALLBACK_ALLOW_UNSIGNED"] is True while DEBUG is False: a production '
                "site would accept unsigned callback requests as soon as its secret is unset.",
                hint="Remove CALLBACK_ALLOW_UNSIGNED (it is for local development only) and set "
                'AWA["CALLBACK_SECRET"] from the environment.',
                id="awa.E011",
            )
        )
    return problems


@checks.register(checks.Tags.security, deploy=True)
def check_callback_secret_for_deploy(
    app_configs: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """`check --deploy`: no secret is an error even under DEBUG, where the ordinary check
    only warns (awa.W013) so that a new project's `migrate` and `awa_worker` still run."""
    try:
        awa = load_settings()
    except ImproperlyConfigured:
        return []  # awa.E003 reports it
    if awa.callback_secrets or awa.callback_allow_unsigned or not settings.DEBUG:
        return []  # set, explicitly unsigned, or already awa.E010 from check_callback_secret
    return [_no_secret()]


@checks.register(checks.Tags.security, deploy=True)
def check_callback_secret_strength(
    app_configs: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """`check --deploy`: every configured secret is long and not one published as an
    example (a rotation list is checked whole: an old key still verifies requests)."""
    try:
        awa = load_settings()
    except ImproperlyConfigured:
        return []  # awa.E003 reports it
    return [
        problem
        for position, secret in enumerate(awa.callback_secrets)
        if (problem := _weak_secret(position, secret)) is not None
    ]


def _weak_secret(position: int, secret: str) -> checks.CheckMessage | None:
    which = f'AWA["CALLBACK_SECRETS"][{position}]' if position else "The callback secret"
    hint = (
        'Generate one with `python -c "import secrets; print(secrets.token_hex(32))"` and '
        "read it from the environment."
    )
    if secret in EXAMPLE_CALLBACK_SECRETS:
        return checks.Warning(
            f"{which} is an example value published with awa-django; anyone can sign "
            "callback requests with it.",
            hint=hint,
            id="awa.W012",
        )
    if len(secret.encode()) < MIN_CALLBACK_SECRET_BYTES:
        return checks.Warning(
            f"{which} is shorter than {MIN_CALLBACK_SECRET_BYTES} bytes: short enough to "
            "guess offline from a single signed request.",
            hint=hint,
            id="awa.W011",
        )
    return None


NO_SECRET = (
    'No callback secret is set (AWA["CALLBACK_SECRET"] or AWA["CALLBACK_SECRETS"] is '
    "missing or empty, e.g. because AWA_CALLBACK_SECRET is not exported), so signed "
    "callback requests cannot be verified and the callback views refuse every request."
)
NO_SECRET_HINT = (
    "Export one before starting Django: "
    'export AWA_CALLBACK_SECRET=$(python -c "import secrets; print(secrets.token_hex(32))") '
    '(the README\'s settings read it into AWA["CALLBACK_SECRET"]); for local development '
    'with DEBUG = True only, set AWA["CALLBACK_ALLOW_UNSIGNED"] = True to accept unsigned '
    "requests."
)


def _no_secret() -> checks.CheckMessage:
    """awa.E010 in production (DEBUG False) and under `check --deploy`; with DEBUG on, the
    ordinary checks only warn (awa.W013): an error would stop `migrate` and `awa_worker` in
    a new project whose shell has not exported the secret yet."""
    return checks.Error(NO_SECRET, hint=NO_SECRET_HINT, id="awa.E010")


def _no_secret_while_debugging() -> checks.CheckMessage:
    return checks.Warning(NO_SECRET, hint=NO_SECRET_HINT, id="awa.W013")


@checks.register()
def check_hook_kinds(
    app_configs: Any = None, hooks: Registry = registry, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Hooks keyed by a kind that no handler serves never fire: usually a typo, or a hook
    registered before its `@job` changed the kind."""
    kinds = sorted({h.kind for h in hooks.hooks() if h.kind is not None})
    return [
        checks.Warning(
            f"Lifecycle hooks are registered for job kind {kind!r}, which has no handler.",
            hint="Check the kind's spelling, or register its handler with @awa_django.job "
            "in an installed app's jobs.py.",
            id="awa.W010",
        )
        for kind in kinds
        if not _kind_is_served(hooks, kind)
    ]


def _kind_is_served(hooks: Registry, kind: str) -> bool:
    """A @job handler or a registry resolver serves it, or it is the dotted path of a
    callable (the django.tasks backend's kinds), whose resolver may not be registered yet."""
    try:
        if hooks.job(kind) is not None:
            return True
    except Exception:
        return True  # a resolver that fails here is its own surface's problem to report
    if "." not in kind:
        return False
    try:
        return callable(import_string(kind))
    except Exception:  # not importable, or its module fails to import: not served
        return False


@checks.register()
def check_schedules(
    app_configs: Any = None, schedules: Registry = registry, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Declared cron schedules: each expression and zone must evaluate here (awa.E020; a
    zone database missing from the image shows up here), and their kind should have a
    handler, or the fires wait for a worker that never comes (awa.W020)."""
    problems: list[checks.CheckMessage] = []
    for definition in schedules.schedules():
        try:
            check_expression(definition.expression)
            check_timezone(definition.timezone)
        except InvalidSchedule as exc:
            problems.append(
                checks.Error(f"Cron schedule {definition.name!r}: {exc}", id="awa.E020")
            )
        if not _kind_is_served(schedules, definition.kind):
            problems.append(
                checks.Warning(
                    f"Cron schedule {definition.name!r} enqueues job kind "
                    f"{definition.kind!r}, which has no handler.",
                    hint="Register its handler with @awa_django.job in an installed app's "
                    "jobs.py, or fix the schedule's args/kind.",
                    id="awa.W020",
                )
            )
    return problems
