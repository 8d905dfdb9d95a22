"""The runtime's own PostgreSQL connections: a small pool and how to reach the server.

Built from `DATABASES[alias]` (OPTIONS included) so the worker talks to exactly the database
Django does, with `application_name` naming the worker unless the user chose one. Every
statement runs in autocommit: no transaction ever stays open while a handler runs. The one
session state, each connection's lease epoch (decision 029), is optional: behind PgBouncer
in transaction mode it is never set and claims stay durable, so the pool works there too.
LISTEN, which needs a session of its own, gets its own connection: `AWA["LISTEN_DATABASE"]`
(an alias or DSN that reaches PostgreSQL directly) or none at all (decision 020).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from psycopg.conninfo import conninfo_to_dict

from awa_django.storage.query import Query
from awa_django.storage.sql import leases as leases_sql

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


def transaction_pooled(alias: str) -> bool:
    """Whether `alias` sits behind a transaction pooler (PgBouncer's pool_mode=transaction),
    as Django's own DISABLE_SERVER_SIDE_CURSORS says: its docs ask for it exactly then."""
    return bool(connections[alias].settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))


def connection_kwargs(alias: str, application_name: str) -> dict[str, Any]:
    """psycopg.connect() arguments equivalent to Django's for `alias`."""
    wrapper = connections[alias]
    params = dict(wrapper.get_connection_params())
    # Django's adapters hand jsonb back as text and its cursor classes bind client-side;
    # the runtime wants psycopg's defaults (decoded JSON, server-side prepared statements).
    for key in ("context", "cursor_factory"):
        params.pop(key, None)
    # Behind a transaction pooler Django's None stays: a statement prepared on one server
    # connection does not exist on the next (PgBouncer < 1.21, or without
    # max_prepared_statements). OPTIONS["prepare_threshold"] opts back in.
    if "prepare_threshold" not in wrapper.settings_dict.get("OPTIONS", {}) and not (
        transaction_pooled(alias)
    ):
        params.pop("prepare_threshold", None)
    return _with_runtime_defaults(params, application_name)


def _with_runtime_defaults(params: dict[str, Any], application_name: str) -> dict[str, Any]:
    params.setdefault("application_name", application_name)
    # A silently dead connection must fail in seconds, not after the kernel's TCP timeout
    # (minutes), or every lease of this worker goes stale while it waits. The user's
    # OPTIONS win where they set these.
    for key, value in _LIVENESS_DEFAULTS.items():
        params.setdefault(key, value)
    params["autocommit"] = True
    return params


def listen_kwargs(
    setting: str | bool | None, alias: str, application_name: str
) -> dict[str, Any] | None:
    """Where the LISTEN connection goes (`AWA["LISTEN_DATABASE"]`), or None for nowhere:
    False says so; None means `alias` itself, unless a transaction pooler is in the way
    (a LISTEN there would sit on a server connection handed to other clients)."""
    if setting is False:
        return None
    if setting is None or setting is True:
        return None if transaction_pooled(alias) else connection_kwargs(alias, application_name)
    if setting in connections.databases:
        if transaction_pooled(setting):
            raise ImproperlyConfigured(
                f'AWA["LISTEN_DATABASE"] names {setting!r}, which is behind a transaction '
                "pooler (DISABLE_SERVER_SIDE_CURSORS): give an alias or DSN that reaches "
                "PostgreSQL directly."
            )
        return connection_kwargs(setting, application_name)
    return _with_runtime_defaults(dsn_params(setting), application_name)


def dsn_params(dsn: str) -> dict[str, Any]:
    """A libpq DSN ("postgres://…" or "host=… dbname=…") as psycopg.connect() arguments;
    anything else is a misspelt alias."""
    if "=" not in dsn and "://" not in dsn:
        raise ImproperlyConfigured(
            f'AWA["LISTEN_DATABASE"] {dsn!r} is neither a DATABASES alias nor a DSN '
            '(such as "postgres://user@db-primary:5432/app").'
        )
    try:
        return dict(conninfo_to_dict(dsn))
    except psycopg.ProgrammingError as exc:
        raise ImproperlyConfigured(f'AWA["LISTEN_DATABASE"] is not a valid DSN: {exc}') from exc


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
    only makes a lease look a little older. Claims do without the flush wait per statement,
    and only where a lease epoch guarantees that a lost claim's run_lease is never handed
    out again (decision 029).
    """
    options = f"{kwargs.get('options', '')} -c synchronous_commit=off".strip()
    return {**kwargs, "options": options}


async def take_lease_epoch(conn: psycopg.AsyncConnection[Any]) -> None:
    """Give a new runtime connection its lease epoch, so that its claims commit without
    the flush wait (decision 029). A server crash ends the connection, and the one opened
    after it takes a later epoch. Where none can be taken (no right to update the table,
    or none left) the connection's claims stay durable; a connection error propagates, so
    the pool discards the connection and opens another."""
    try:
        epoch = await leases_sql.lease_epoch_take().arun(conn)
    except psycopg.OperationalError:
        raise
    except psycopg.DatabaseError as exc:
        logger.warning("claims stay durable on this connection: no lease epoch (%s)", exc)
        return
    if epoch is None:
        logger.warning("claims stay durable on this connection: the lease epochs ran out")


class Database:
    """The runtime's connection pool; services run their named statements through `run`."""

    def __init__(
        self,
        alias: str,
        application_name: str,
        max_size: int,
        listen: str | bool | None = None,
    ) -> None:
        self.alias = alias
        self.pooled = transaction_pooled(alias)
        self.kwargs = connection_kwargs(alias, application_name)
        # None: no LISTEN connection at all; the dispatchers' poll timer finds the work.
        self.listen_kwargs = listen_kwargs(listen, alias, application_name)
        self.pool = self._pool(self.kwargs, max_size, "awa-worker", self.pooled)

    @staticmethod
    def _pool(
        kwargs: dict[str, Any], max_size: int, name: str, pooled: bool
    ) -> psycopg_pool.AsyncConnectionPool:
        return psycopg_pool.AsyncConnectionPool(
            kwargs=kwargs,
            min_size=1,
            max_size=max_size,
            open=False,
            timeout=10.0,
            reconnect_timeout=0,  # never give up: a database outage is waited out
            name=name,
            # Behind a transaction pooler a session setting would reach other clients and
            # outlive a server restart unseen: claims there stay durable (decision 029).
            configure=None if pooled else take_lease_epoch,
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
        """A dedicated synchronous connection for heartbeats (no WAL flush wait, except
        behind a transaction pooler: PgBouncer < 1.20 refuses the `options` startup
        parameter, and a session SET would leak to the pool's other clients)."""
        return psycopg.connect(**self.heartbeat_kwargs)

    @property
    def heartbeat_kwargs(self) -> dict[str, Any]:
        return self.kwargs if self.pooled else without_flush_wait(self.kwargs)

    async def aconnect_listen(self) -> psycopg.AsyncConnection[Any]:
        """The dedicated LISTEN connection (only when `listen_kwargs` is set)."""
        assert self.listen_kwargs is not None
        return await psycopg.AsyncConnection.connect(**self.listen_kwargs)


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
