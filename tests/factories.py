"""factory-boy factories for awa-django's models (rows written through the ORM)."""

from __future__ import annotations

import factory

from awa_django.storage.models import Job


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    kind = "send_receipt"
    queue = "default"
    args = factory.Sequence(lambda n: {"order_id": n})
    state = "available"
    priority = 2
    max_attempts = 25
