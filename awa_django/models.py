"""Django loads an app's models from `<app>.models`; awa-django's live in `storage.models`."""

from awa_django.storage.models import ActiveLease, Job, LeaderLease, QueueState, WorkerInstance

__all__ = ["ActiveLease", "Job", "LeaderLease", "QueueState", "WorkerInstance"]
