"""Queues on the Client's side: pause and resume (the small queue-state table, through the
ORM) and the figures operators read (storage/figures.py).

The ORM side of storage is imported on first use: `awa_django` imports the client, and
Django imports the app's package before its models may be loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models.functions import Now

from awa_django import limits
from awa_django.codec import storable_text
from awa_django.conf import awa_settings, validate_queue_name
from awa_django.exceptions import InvalidQueueLimits
from awa_django.limits import RateLimit
from awa_django.registry import registry
from awa_django.snapshot import LiveWorker, QueueStats

if TYPE_CHECKING:
    from awa_django.storage.models import QueueState

MAX_PAUSED_BY_CHARS = 200  # awa_queue_state.paused_by is varchar(200)


def pause(using: str, queue: str, by: str) -> QueueState:
    from awa_django.storage.models import QueueState

    validate_queue_name(queue)
    paused_by = storable_text(str(by))[:MAX_PAUSED_BY_CHARS]
    state, _ = QueueState.objects.using(using).update_or_create(
        queue=queue, defaults={"paused": True, "paused_at": Now(), "paused_by": paused_by}
    )
    state.refresh_from_db(fields=["paused_at"])
    return state


def resume(using: str, queue: str) -> QueueState:
    from awa_django.storage.models import QueueState

    validate_queue_name(queue)
    state, _ = QueueState.objects.using(using).update_or_create(
        queue=queue, defaults={"paused": False, "paused_at": None, "paused_by": ""}
    )
    return state


def set_limits(
    using: str,
    queue: str,
    concurrency: int | None,
    rate_limit: RateLimit | tuple[float, int] | float | None,
    by: str,
) -> QueueState:
    """Replace the queue's runtime overrides as a whole (None: that limit is not
    overridden); every worker applies them within OVERRIDE_REFRESH_INTERVAL."""
    from awa_django.storage.models import QueueState

    validate_queue_name(queue)
    try:
        cap = None if concurrency is None else limits.concurrency(concurrency)
        rate = None if rate_limit is None else limits.rate_limit(rate_limit)
    except ValueError as exc:
        raise InvalidQueueLimits(f"queue {queue!r}: {exc}") from exc
    state, _ = QueueState.objects.using(using).update_or_create(
        queue=queue,
        defaults={
            "concurrency_override": cap,
            "rate_override": rate.rate if rate else None,
            "burst_override": rate.burst if rate else None,
            "limits_by": storable_text(str(by))[:MAX_PAUSED_BY_CHARS],
        },
    )
    return state


def clear_limits(using: str, queue: str) -> QueueState:
    """Drop the queue's runtime overrides: its settings apply again."""
    return set_limits(using, queue, None, None, "")


def stats(using: str, window_minutes: int) -> list[QueueStats]:
    from awa_django.storage import figures

    return figures.queue_stats(window_minutes, using=using)


def live_workers(using: str, within_seconds: float | None) -> list[LiveWorker]:
    from awa_django.storage import figures

    return figures.live_workers(within_seconds, using=using)


def unhandled_kinds(using: str) -> dict[str, int]:
    from awa_django.storage import figures

    return figures.unhandled_kinds(using=using)


def known_queues(using: str) -> set[str]:
    from awa_django.storage import figures

    known = set(awa_settings().queues)
    known.update(definition.queue for definition in registry.jobs())
    known.update(figures.queues_with_state(using=using))
    return known
