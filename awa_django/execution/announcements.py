"""Events the fan-in trigger owes (decision 046): a child its parents' failure cancels
(policy `cancel`) gets one outbox row in the parent's transaction, whichever statement
ended the parent; the leader's announcer and the inline runner claim those rows and turn
them into `Cancelled` events here.

Both schedulers claim the rows and insert the events' follow-up jobs in one transaction
(so a follow-up is inserted exactly once, or not at all when its builder fails), then
dispatch the events once it commits, as every other event is (decision 010).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from awa_django.events import Cancelled, Event
from awa_django.registry import registry
from awa_django.storage.sql.workflows import Announcement

logger = logging.getLogger("awa_django.worker")

CANCELLED = "cancelled"


def builders_wanted() -> bool:
    """Some kind has an `on_cancelled_enqueue` builder: only then does a claim need a
    transaction around it (the claim alone is one atomic statement)."""
    return any(r.event is Cancelled for r in registry.follow_ups())


def events_of(announcements: Sequence[Announcement]) -> list[Event[Any]]:
    """The events of claimed rows, in claim order. A row whose job is gone (pruned before
    anyone claimed it, so only after a leaderless spell longer than the retention) or
    whose event this version does not know is logged and dropped: it was claimed, and
    keeping it would only replay the same miss."""
    events: list[Event[Any]] = []
    for row in announcements:
        if row.job is None:
            logger.warning("job %s is gone: its %s event was not announced", row.job_id, row.event)
        elif row.event != CANCELLED:
            logger.warning("job %s: unknown announced event %r dropped", row.job_id, row.event)
        else:
            events.append(Cancelled(job=row.job, reason=row.reason))
    return events
