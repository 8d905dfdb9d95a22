"""factory-boy factories for awa-django's models (rows written through the ORM)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import factory
from django.db import connection
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


def old_schema_job(
    queue: str,
    state: str,
    *,
    tags: list[str] | None = None,
    attempt: int = 0,
    run_lease: int = 0,
) -> Job:
    """A job row written with the columns every migration since 0001 has, for the upgrade
    tests that migrate back first: the ORM's INSERT names every column of the current
    model (0013's workflow flags included), which an older schema lacks. Returns an
    unsaved Job carrying the row's id and the given values."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, "
            "max_attempts, run_lease, errors, metadata, tags, attempted_by) "
            "VALUES ('send_receipt', %s, '{}', %s, %s, %s, %s, %s, '[]', '{}', %s, '{}') "
            "RETURNING id",
            [queue, state, DEFAULT_PRIORITY, attempt, DEFAULT_MAX_ATTEMPTS, run_lease, tags or []],
        )
        row = cursor.fetchone()
    assert row is not None
    return Job(
        id=row[0], queue=queue, state=state, tags=tags or [], attempt=attempt, run_lease=run_lease
    )


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
