"""The Django admin as an operations console: the job list, detail and actions
(`jobs.py`), the queue dashboard (`dashboard.py`). Registered on the default admin site."""

from __future__ import annotations

from django.contrib import admin

from awa_django.admin.jobs import JobAdmin
from awa_django.storage.models import Job

admin.site.register(Job, JobAdmin)

__all__ = ["JobAdmin"]
