"""The LISTEN connection: wakes dispatchers on their queue's channel and sets the cancel
flag of an attempt named on `awa_cancel`. NOTIFY is only a hint: after every (re)connect
each dispatcher polls at once, so nothing that happened meanwhile is missed.

It is a connection of its own, never a pooled one: `AWA["LISTEN_DATABASE"]` says where it
goes. With none (LISTEN_DATABASE False, or DATABASE behind a transaction pooler and no
LISTEN_DATABASE) the worker polls: pickup waits up to POLL_INTERVAL and a cancel reaches a
running handler at its next heartbeat (decision 020)."""

from __future__ import annotations

import asyncio
import json
import logging

from psycopg import sql

from awa_django.channels import CANCEL_CHANNEL, channel_for
from awa_django.worker.database import TRANSIENT_ERRORS, Backoff, Database
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.inflight import InFlight

logger = logging.getLogger("awa_django.worker")


class Listener:
    def __init__(self, db: Database, dispatchers: list[Dispatcher], inflight: InFlight) -> None:
        self.db = db
        self.inflight = inflight
        self.by_channel = {channel_for(d.queue.name): d for d in dispatchers}
        self.connected = asyncio.Event()

    def handle(self, channel: str, payload: str) -> None:
        if channel == CANCEL_CHANNEL:
            try:
                target = json.loads(payload)
                self.inflight.mark_cancelled(int(target["job_id"]), int(target["run_lease"]))
            except (ValueError, KeyError, TypeError):
                logger.warning("ignoring malformed %s payload %r", CANCEL_CHANNEL, payload)
        elif (dispatcher := self.by_channel.get(channel)) is not None:
            dispatcher.wake()

    async def run(self) -> None:
        if self.db.listen_kwargs is None:
            self._warn_polling()
            return
        backoff = Backoff(first=0.5, cap=10.0)
        while True:
            try:
                conn = await self.db.aconnect_listen()
            except TRANSIENT_ERRORS as exc:
                delay = backoff.next_delay()
                logger.warning("LISTEN connection failed (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            try:
                async with conn:
                    for channel in [*self.by_channel, CANCEL_CHANNEL]:
                        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    backoff.reset()
                    self.connected.set()
                    for dispatcher in self.by_channel.values():
                        dispatcher.wake()
                    async for notify in conn.notifies():
                        self.handle(notify.channel, notify.payload)
            except TRANSIENT_ERRORS as exc:
                self.connected.clear()
                delay = backoff.next_delay()
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay)

    def _warn_polling(self) -> None:
        if self.db.pooled:
            why = (
                f"DATABASES[{self.db.alias!r}] is behind a transaction pooler "
                "(DISABLE_SERVER_SIDE_CURSORS), where LISTEN cannot work, and "
                'AWA["LISTEN_DATABASE"] is not set'
            )
        else:
            why = 'AWA["LISTEN_DATABASE"] is False'
        logger.warning(
            "no LISTEN connection: %s. Polling every POLL_INTERVAL instead (pickup takes up "
            "to that long; cancels reach running jobs at their next heartbeat). To be woken "
            'at once, set AWA["LISTEN_DATABASE"] to an alias or DSN that reaches PostgreSQL '
            "directly (docs/deployment.md).",
            why,
        )
