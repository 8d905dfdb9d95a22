"""factory-boy factories for awa-django's models (rows written through the ORM)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import factory
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Model
from django.utils import timezone

from awa_django.conf import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE
from awa_django.storage.models import CronSchedule, DeadLetter, Job


class ModelFactory[M: Model](factory.django.DjangoModelFactory[M]):
    """A DjangoModelFactory whose call mypy types as the model: `JobFactory(...)` is a Job.

    Subclass it as `class JobFactory(ModelFactory[Job])`."""

    class Meta:
        abstract = True

    if TYPE_CHECKING:
        # factory-boy's metaclass turns `Factory(...)` into `Factory.create(...)` without
        # declaring it; mypy would type the call as an instance of the factory. mypy wants
        # __new__ to return instances of its class, hence the ignore. Type-checking only:
        # at runtime the metaclass never calls __new__.
        def __new__(cls, **fields: Any) -> M: ...  # type: ignore[misc]


class JobFactory(ModelFactory[Job]):
    class Meta:
        model = Job

    kind = "send_receipt"
    queue = DEFAULT_QUEUE
    args = factory.Sequence(lambda n: {"order_id": n})
    state = "available"
    priority = DEFAULT_PRIORITY
    max_attempts = DEFAULT_MAX_ATTEMPTS


class DeadLetterFactory(ModelFactory[DeadLetter]):
    class Meta:
        model = DeadLetter

    id = factory.Sequence(lambda n: 10_000_000 + n)
    kind = "send_receipt"
    queue = DEFAULT_QUEUE
    args = factory.Sequence(lambda n: {"order_id": n})
    priority = DEFAULT_PRIORITY
    max_attempts = 3
    attempt = 3
    run_lease = 3
    created_at = factory.LazyFunction(timezone.now)
    errors = factory.LazyFunction(lambda: [{"error": "boom", "attempt": 3, "terminal": True}])
    reason = "max_attempts_exhausted"


class CronScheduleFactory(ModelFactory[CronSchedule]):
    class Meta:
        model = CronSchedule

    name = factory.Sequence(lambda n: f"schedule-{n}")
    expression = "*/5 * * * *"
    kind = "send_receipt"


@functools.cache
def _job_model_at(app: str, migration: str) -> Any:
    executor = MigrationExecutor(connection)
    return executor.loader.project_state((app, migration)).apps.get_model("awa_django", "Job")


def job_at_migration(target: tuple[str, str], **fields: Any) -> Any:
    """A job written through the Job model as it was at migration `target`: the tests that
    migrate back to an older schema write their rows in flight with it, since today's model
    names columns that schema does not have yet. Defaults as JobFactory's."""
    fields.setdefault("kind", "send_receipt")
    fields.setdefault("args", {"order_id": 1})
    return _job_model_at(*target).objects.create(**fields)
