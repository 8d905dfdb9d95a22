"""Settings of the example project that the demo and the tests run (django-environ)."""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env(
    DEBUG=(bool, True),
    SECRET_KEY=(str, "awa-django-dev-only-secret-key-change-me"),
    DATABASE_URL=(str, "postgres://postgres@127.0.0.1:5432/awa_django"),
    AWA_CALLBACK_SECRET=(str, "dev-callback-secret-change-me"),
)

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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"

AWA = {
    "QUEUES": {
        "default": {"concurrency": 10},
        "email": {"concurrency": 4, "deadline": 60},
    },
    "CALLBACK_SECRET": env("AWA_CALLBACK_SECRET"),
}

# Django's own @task functions run on awa too (docs/django-tasks.md).
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
