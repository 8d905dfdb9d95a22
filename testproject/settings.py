"""Settings of the example project that the demo and the tests run (django-environ).

Every secret and DEBUG come from the environment. The defaults suit a local demo only:
a deployment sets DEBUG=False, SECRET_KEY and AWA_CALLBACK_SECRET (or the rotation list
AWA_CALLBACK_SECRETS), and `manage.py check --deploy` warns about any default left in place.
"""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
# Published demo values: awa.W012 and Django's security.W009 flag them under --deploy.
DEMO_CALLBACK_SECRET = "awa-django-demo-callback-secret-do-not-deploy"
env = environ.Env(
    DEBUG=(bool, True),
    SECRET_KEY=(str, "awa-django-dev-only-secret-key-change-me"),
    DATABASE_URL=(str, "postgres://postgres@127.0.0.1:5432/awa_django"),
)

# True by default so `make admin` serves the admin's static files; never in a deployment.
DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY")
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "awa_django",
    "testproject.shop",
    "testproject.testjobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": env.db("DATABASE_URL")}
# DATABASE_POOLED=1: DATABASE_URL goes through PgBouncer in transaction mode
# (tests/acceptance/test_pgbouncer.py). Django's setting for that case, which the worker
# reads too (docs/deployment.md).
if env.bool("DATABASE_POOLED", default=False):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# A second database standing in for a read replica (tests/integration/test_read_replica.py):
# not streamed from "default", so a test can tell which one a page read. Only tests that
# ask for it create it.
DATABASES["replica"] = {**DATABASES["default"], "NAME": f"{DATABASES['default']['NAME']}_replica"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"


def _callback_secrets() -> dict[str, Any]:
    """AWA_CALLBACK_SECRETS (comma-separated, newest first) while rotating a secret, else
    AWA_CALLBACK_SECRET, else the demo value."""
    rotation = [s.strip() for s in env.list("AWA_CALLBACK_SECRETS", default=[]) if s.strip()]
    if rotation:
        return {"CALLBACK_SECRETS": rotation}
    return {"CALLBACK_SECRET": env.str("AWA_CALLBACK_SECRET", default=DEMO_CALLBACK_SECRET)}


def _listen_database() -> dict[str, Any]:
    """AWA_LISTEN_DATABASE: an alias or DSN for the LISTEN connection, or "false" (poll
    only). The PgBouncer acceptance test points it past the pooler."""
    value = env.str("AWA_LISTEN_DATABASE", default="")
    if not value:
        return {}
    return {"LISTEN_DATABASE": False if value.lower() == "false" else value}


def _hook_backlog() -> dict[str, Any]:
    """AWA_HOOK_OVERFLOW ("drop" | "pause") and AWA_HOOK_BACKLOG (events), when set: the
    acceptance tests run workers with a tiny backlog this way. Unset, the defaults apply."""
    overrides: dict[str, Any] = {}
    if env.str("AWA_HOOK_OVERFLOW", default=""):
        overrides["HOOK_OVERFLOW"] = env.str("AWA_HOOK_OVERFLOW")
    if env.str("AWA_HOOK_BACKLOG", default=""):
        overrides["HOOK_BACKLOG"] = env.int("AWA_HOOK_BACKLOG")
    return overrides


def _dead_letter_queues() -> dict[str, Any]:
    """AWA_DEAD_LETTER_QUEUES (comma-separated), when set: queues whose failed jobs move to
    the dead letters (docs/dead-letters.md); the acceptance tests start workers with it."""
    names = [n.strip() for n in env.list("AWA_DEAD_LETTER_QUEUES", default=[]) if n.strip()]
    return {name: {"concurrency": 4, "dead_letter": True} for name in names}


def _flow_control() -> dict[str, Any]:
    """AWA_TEST_QUEUES / AWA_TEST_WORKER (JSON) and AWA_OVERRIDE_REFRESH_INTERVAL, when set:
    the flow-control acceptance tests run workers with rate limits and weights this way."""
    overrides: dict[str, Any] = {}
    if env.str("AWA_TEST_QUEUES", default=""):
        overrides["QUEUES"] = json.loads(env.str("AWA_TEST_QUEUES"))
    if env.str("AWA_TEST_WORKER", default=""):
        overrides["WORKER"] = json.loads(env.str("AWA_TEST_WORKER"))
    if env.str("AWA_OVERRIDE_REFRESH_INTERVAL", default=""):
        overrides["OVERRIDE_REFRESH_INTERVAL"] = env.float("AWA_OVERRIDE_REFRESH_INTERVAL")
    return overrides


def _aged_queues() -> dict[str, Any]:
    """AWA_PRIORITY_AGING="queue=seconds[,queue=seconds]": extra queues with priority aging
    (the acceptance tests age a queue this way). Unset, none."""
    aged = {}
    for item in env.list("AWA_PRIORITY_AGING", default=[]):
        name, _, seconds = item.partition("=")
        aged[name.strip()] = {"concurrency": 1, "priority_aging": float(seconds)}
    return aged


AWA = {
    "QUEUES": {
        "default": {"concurrency": 10},
        "email": {"concurrency": 4, "deadline": 60},
        **_dead_letter_queues(),
        **_aged_queues(),
    },
    **_callback_secrets(),
    **_hook_backlog(),
    **_flow_control(),
    **_listen_database(),
}

# Django's own @task functions run on awa too (docs/django-tasks.md): django.tasks on
# Django 6.0+, the django-tasks backport on 5.2 (without either, TASKS would be awa.E031).
if find_spec("django.tasks") or find_spec("django_tasks"):
    TASKS = {
        "default": {
            "BACKEND": "awa_django.backends.AwaBackend",
            "QUEUES": ["default", "email"],
        }
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "awa_django": {"handlers": ["console"], "level": env("AWA_LOG_LEVEL", default="INFO")}
    },
}
