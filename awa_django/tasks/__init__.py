"""Django's `django.tasks` running on awa: the backend (enqueue, results) and the runner
(handlers for task kinds, Django's task signals). The framework itself comes from Django
6.0+ or, on Django 5.2, from the django-tasks backport (`framework.py`, decision 019).

`AVAILABLE` says whether either is installed; only then may the submodules be imported.
"""

from __future__ import annotations

import importlib.util

BUILTIN = importlib.util.find_spec("django.tasks") is not None
BACKPORT = importlib.util.find_spec("django_tasks") is not None
AVAILABLE = BUILTIN or BACKPORT

MISSING = (
    "AwaBackend needs Django's task framework: Django 6.0+ has django.tasks built in; on "
    'Django 5.2 install the backport with pip install "awa-django[tasks]" (the django-tasks '
    "package)."
)
