"""The LISTEN connection: wakes dispatchers on their queue's channels, sets the cancel flag
of an attempt named on `awa_cancel`, and carries the waker roles (worker/waker.py): their
advisory locks live on this session, so a role ends with it. It LISTENs on each queue's
role channel from the start, and on a queue's hint channel only while it holds the role.
NOTIFY is only a hint: after every (re)connect each dispatcher polls at once, so nothing
that happened meanwhile is missed.

It is a connection of its own, never a pooled one: `AWA["LISTEN_DATABASE"]` says where it
goes. With none (LISTEN_DATABASE False, or DATABASE behind a transaction pooler and no
LISTEN_DATABASE) the worker polls: pickup waits up to POLL_INTERVAL and a cancel reaches a
running handler at its next heartbeat (decision 020)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any, TypeVar

import psycopg

from awa_django.channels import CANCEL_CHANNEL, channel_for, role_channel_for
from awa_django.storage.query import Query
from awa_django.storage.sql import wakers as wakers_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Backoff, Database
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.inflight import InFlight
from awa_django.worker.waker import WakerRole

logger = logging.getLogger("awa_django.worker")
T = TypeVar("T")


class Listener:
    def __init__(self, db: Database, dispatchers: list[Dispatcher], inflight: InFlight) -> None:
        self.db = db
        self.inflight = inflight
        self.dispatchers = dispatchers
        self.by_channel = {
            channel: d
            for d in dispatchers
            for channel in (channel_for(d.queue.name), role_channel_for(d.queue.name))
        }
        self.connected = asyncio.Event()
        self.generation = 0  # LISTEN connections made so far (worker/waker.py Session)
        # Statements the roles asked to run on this session, answered between notifications.
        self._asked: deque[tuple[Query[Any], int, asyncio.Future[Any]]] = deque()
        self._ask = asyncio.Event()
        if db.listen_kwargs is not None:
            for dispatcher in dispatchers:
                handled = dispatcher.handled.signature if dispatcher.handled else ""
                dispatcher.role = WakerRole(dispatcher.queue.name, self, handled)

    @property
    def listening(self) -> bool:
        return self.connected.is_set()

    def handle(self, channel: str, payload: str) -> None:
        if channel == CANCEL_CHANNEL:
            try:
                target = json.loads(payload)
                self.inflight.mark_cancelled(int(target["job_id"]), int(target["run_lease"]))
            except (ValueError, KeyError, TypeError):
                logger.warning("ignoring malformed %s payload %r", CANCEL_CHANNEL, payload)
        elif (dispatcher := self.by_channel.get(channel)) is not None:
            dispatcher.notified(payload)

    async def execute(self, query: Query[T], generation: int) -> T | None:
        """Run `query` on LISTEN connection `generation` between two notifications; None
        when that connection is gone (its session took its advisory locks with it)."""
        if generation != self.generation or not self.listening:
            return None
        answer: asyncio.Future[T | None] = asyncio.get_running_loop().create_future()
        self._asked.append((query, generation, answer))
        self._ask.set()
        return await answer

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
                    await wakers_sql.waker_session_liveness().arun(conn)
                    roles = [role_channel_for(d.queue.name) for d in self.dispatchers]
                    for channel in [*roles, CANCEL_CHANNEL]:
                        await wakers_sql.listen(channel).arun(conn)
                    backoff.reset()
                    self.generation += 1
                    self.connected.set()
                    self._wake_all()
                    await self._serve(conn)
            except TRANSIENT_ERRORS as exc:
                self._lost()  # before the sleep: the roles are gone now
                delay = backoff.next_delay()
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay)
            finally:
                self._lost()

    def _wake_all(self) -> None:
        for dispatcher in self.dispatchers:
            dispatcher.wake()

    def _lost(self) -> None:
        """The session is gone, and every role held on it: each dispatcher polls at once
        and then every POLL_INTERVAL until a new session lets it try for its role."""
        if not self.connected.is_set():
            return
        self.connected.clear()
        self.generation += 1  # roles held on the old session no longer count
        self._answer_stale()
        self._wake_all()

    async def _serve(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Deliver notifications as they arrive; when a role asks for a statement, stop
        reading, run it, and read on. psycopg keeps the notifications that arrive
        meanwhile and hands them to the next `notifies()`, so none is lost."""
        while True:
            receiving = asyncio.ensure_future(self._receive(conn))
            asked = asyncio.ensure_future(self._ask.wait())
            try:
                await asyncio.wait({receiving, asked}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                receiving.cancel()
                asked.cancel()
                await asyncio.gather(receiving, asked, return_exceptions=True)
            if not receiving.cancelled() and (error := receiving.exception()) is not None:
                raise error
            self._ask.clear()
            await self._answer(conn)

    async def _receive(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async for notify in conn.notifies():
            self.handle(notify.channel, notify.payload)

    async def _answer(self, conn: psycopg.AsyncConnection[Any]) -> None:
        while self._asked:
            query, generation, answer = self._asked.popleft()
            if answer.done():
                continue  # its asker was cancelled
            if generation != self.generation:
                answer.set_result(None)
                continue
            try:
                result = await query.arun(conn)
            except TRANSIENT_ERRORS:
                _settle(answer, None)
                raise
            except Exception as exc:  # a bug, not an outage: the asker logs it
                if not answer.done():
                    answer.set_exception(exc)
            else:
                _settle(answer, result)

    def _answer_stale(self) -> None:
        while self._asked:
            _, _, answer = self._asked.popleft()
            _settle(answer, None)

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


def _settle(answer: asyncio.Future[Any], result: Any) -> None:
    """Answer a role's statement, unless its asker was cancelled while it ran."""
    if not answer.done():
        answer.set_result(result)
