"""The Django admin as an operations console: the job list, detail and actions
(`jobs.py`; a job's flow in `flows.py`), the queue dashboard (`dashboard.py`), the cron
schedules (`schedules.py`), the dead letters (`dead_letters.py`) and the batches
(`batches.py`).
Registered on the default admin site."""

from __future__ import annotations

from django.contrib import admin

from awa_django.admin.batches import BatchAdmin
from awa_django.admin.dead_letters import DeadLetterAdmin
from awa_django.admin.jobs import JobAdmin
from awa_django.admin.schedules import CronScheduleAdmin
from awa_django.storage.models import CronSchedule, DeadLetter, Job
from awa_django.storage.workflows import Batch

admin.site.register(Job, JobAdmin)
admin.site.register(CronSchedule, CronScheduleAdmin)
admin.site.register(DeadLetter, DeadLetterAdmin)
admin.site.register(Batch, BatchAdmin)
# The index links to the queue dashboard; a site with its own index template keeps it.
if admin.site.index_template is None:
    admin.site.index_template = "admin/awa_django/index.html"

__all__ = ["BatchAdmin", "CronScheduleAdmin", "DeadLetterAdmin", "JobAdmin"]
