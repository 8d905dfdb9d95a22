"""The runtime's own PostgreSQL connections: a small pool and how to reach the server.

Built from `DATABASES[alias]` (OPTIONS included) so the worker talks to exactly the database
Django does, with `application_name` naming the worker unless the user chose one. Every
statement runs in autocommit: no transaction ever stays open while a handler runs.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from django.db import connections

from awa_django.storage.query import Query

logger = logging.getLogger("awa_django.worker")
T = TypeVar("T")

# Errors that mean "the database is away or cannot take writes right now": wait and retry.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.errors.ReadOnlySqlTransaction,
    psycopg_pool.PoolTimeout,
)


_LIVENESS_DEFAULTS = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,  # ms: unacknowledged data (a write into a dead link)
}


def connection_kwargs(alias: str, application_name: str) -> dict[str, Any]:
    """psycopg.connect() arguments equivalent to Django's for `alias`."""
    wrapper = connections[alias]
    params = dict(wrapper.get_connection_params())
    # Django's adapters hand jsonb back as text and its cursor classes bind client-side;
    # the runtime wants psycopg's defaults (decoded JSON, server-side prepared statements).
    for key in ("context", "cursor_factory"):
        params.pop(key, None)
    if "prepare_threshold" not in wrapper.settings_dict.get("OPTIONS", {}):
        params.pop("prepare_threshold", None)
    params.setdefault("application_name", application_name)
    # A silently dead connection must fail in seconds, not after the kernel's TCP timeout
    # (minutes), or every lease of this worker goes stale while it waits. The user's
    # OPTIONS win where they set these.
    for key, value in _LIVENESS_DEFAULTS.items():
        params.setdefault(key, value)
    params["autocommit"] = True
    return params


_MAX_DOUBLINGS = 64


class Backoff:
    """Capped, jittered exponential back-off for reconnect loops."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first, self.cap, self.failures = first, cap, 0

    def next_delay(self) -> float:
        self.failures += 1
        # The doubling stops at 2**64, far past any cap: `first * 2 ** (failures - 1)`
        # overflowed a float after 1024 failures in a row (a long outage) and raised
        # OverflowError out of the reconnect loop.
        doublings = min(self.failures - 1, _MAX_DOUBLINGS)
        base = min(self.cap, self.first * 2.0**doublings)
        return base / 2 + random.random() * base / 2

    def reset(self) -> None:
        self.failures = 0


def without_flush_wait(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The same connection, committing without waiting for the WAL flush.

    Only the heartbeat thread uses it (decision 006): a heartbeat lost in a server crash
    only makes a lease look a little older. Claims must stay durable: a lost claim would
    let the next claim hand out the same run_lease again.
    """
    options = f"{kwargs.get('options', '')} -c synchronous_commit=off".strip()
    return {**kwargs, "options": options}


class Database:
    """The runtime's connection pool; services run their named statements through `run`."""

    def __init__(self, alias: str, application_name: str, max_size: int) -> None:
        self.alias = alias
        self.kwargs = connection_kwargs(alias, application_name)
        self.pool = self._pool(self.kwargs, max_size, "awa-worker")

    @staticmethod
    def _pool(kwargs: dict[str, Any], max_size: int, name: str) -> psycopg_pool.AsyncConnectionPool:
        return psycopg_pool.AsyncConnectionPool(
            kwargs=kwargs,
            min_size=1,
            max_size=max_size,
            open=False,
            timeout=10.0,
            reconnect_timeout=0,  # never give up: a database outage is waited out
            name=name,
        )

    async def open(self) -> None:
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close(timeout=2.0)

    async def run(self, query: Query[T]) -> T:
        """Run one named statement on a pooled connection (autocommit)."""
        async with self.pool.connection() as conn:
            return await query.arun(conn)

    async def run_in_transaction(
        self, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]
    ) -> T:
        """Run `work`'s statements on one pooled connection in one transaction (an outcome
        and its follow-up jobs): committed if it returns, rolled back if it raises."""
        async with self.pool.connection() as conn, conn.transaction():
            return await work(conn)

    def connect(self) -> psycopg.Connection[Any]:
        """A dedicated synchronous connection for heartbeats (no WAL flush wait)."""
        return psycopg.connect(**without_flush_wait(self.kwargs))

    async def aconnect(self) -> psycopg.AsyncConnection[Any]:
        """A dedicated asynchronous connection (the LISTEN connection)."""
        return await psycopg.AsyncConnection.connect(**self.kwargs)


async def retry_transient(
    operation: Callable[[], Awaitable[T]], what: str, give_up: Callable[[], bool]
) -> T | None:
    """Run `operation` until it succeeds, waiting out database outages with back-off.
    Returns None only when `give_up()` turns true (a forced shutdown)."""
    backoff = Backoff()
    while True:
        try:
            return await operation()
        except TRANSIENT_ERRORS as exc:
            if give_up():
                logger.error("giving up on %s: %s", what, exc)
                return None
            delay = backoff.next_delay()
            logger.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)
