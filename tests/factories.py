"""factory-boy factories for awa-django's models (rows written through the ORM)."""

from __future__ import annotations

import factory

from awa_django.conf import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE
from awa_django.storage.models import Job


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    kind = "send_receipt"
    queue = DEFAULT_QUEUE
    args = factory.Sequence(lambda n: {"order_id": n})
    state = "available"
    priority = DEFAULT_PRIORITY
    max_attempts = DEFAULT_MAX_ATTEMPTS
