"""Announces the events of transitions the fan-in trigger made (decision 046): claims the
outbox rows of children their parents' failure cancelled, inserts their
`on_cancelled_enqueue` follow-ups in the claim's transaction, and once it commits emits
one `Cancelled` per child in this (the leader's) process."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg

from awa_django.events import Cancelled, Event
from awa_django.execution import announcements, follow_ups
from awa_django.storage.sql import workflows as workflows_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Database

logger = logging.getLogger("awa_django.worker")

BATCH = 500
# Per run: a cancelled flow of many children is announced over several ticks, so the
# leader lease is renewed in between.
MAX_BATCHES = 20


class Announcer:
    def __init__(self, db: Database, emit: Callable[[Event], None]) -> None:
        self.db = db
        self.emit = emit

    async def run_once(self) -> list[Event]:
        """The events emitted, in the order the trigger wrote their rows."""
        emitted: list[Event] = []
        for _ in range(MAX_BATCHES):
            if announcements.builders_wanted():
                claimed, events = await self.db.run_in_transaction(self._claim)
            else:  # the claim alone: one autocommitted statement per idle tick
                rows = await self.db.run(workflows_sql.event_outbox_claim(limit=BATCH))
                claimed, events = len(rows), announcements.events_of(rows)
            # Committed: each row was deleted by this claim only, so each event goes out
            # once (at most once: a crash from here on loses it, as any hook, decision 010).
            for event in events:
                self.emit(event)
            emitted += events
            if claimed < BATCH:
                break
        return emitted

    async def _claim(self, conn: psycopg.AsyncConnection[Any]) -> tuple[int, list[Event]]:
        rows = await workflows_sql.event_outbox_claim(limit=BATCH).arun(conn)
        events = announcements.events_of(rows)
        for event in events:
            if follow_ups.wanted(Cancelled, event.job.kind):
                await self._follow_ups(conn, event)
        return len(rows), events

    async def _follow_ups(self, conn: psycopg.AsyncConnection[Any], event: Event) -> None:
        """In a savepoint of the claim: a failing builder (or insert) loses that job's
        follow-ups, logged, and never holds back the other announcements; the rows stay
        claimed (retrying would fail the same way)."""
        try:
            async with conn.transaction():
                inserts = follow_ups.insert([event])
                if inserts is not None:
                    await inserts.arun(conn)
        except TRANSIENT_ERRORS:
            raise  # the claim rolls back and the next run takes the rows again
        except Exception:
            logger.exception("follow-up jobs of cancelled job %s were not enqueued", event.job.id)
