"""Statements of the waker role: the one worker process per queue that claims on a NOTIFY
(decision 025). The role is a session advisory lock held on that process's LISTEN
connection, so it ends with the session that hears the notifications; only that session
LISTENs for the queue's enqueue hints."""

from __future__ import annotations

import hashlib

from psycopg import sql

from awa_django.channels import WAKER_VACANT
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement


def _set_if_default(setting: str, value: str) -> str:
    return (
        f"CASE WHEN current_setting('{setting}') = '0' "
        f"THEN set_config('{setting}', '{value}', false) END"
    )


# A fixed prefix keeps our keys apart from an application's own advisory locks in practice.
_KEY_PREFIX = b"awa_django waker:"


def waker_key(queue: str, handled: str = "") -> int:
    """The role of the queue (for the processes whose kind set `handled` names; "" for
    every kind, as earlier releases) as a signed 64-bit advisory lock key. 64 bits, not the
    two-int4 form: two queues sharing a key would let one process's role shut the other
    queue's processes out of theirs, and every pickup on it would wait for a standby poll."""
    name = queue.encode() + (b"\0" + handled.encode() if handled else b"")
    digest = hashlib.blake2b(_KEY_PREFIX + name, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# Params: key (waker_key). Index: none; the lock manager only. Never blocks: a process
# that does not get the role simply stays a standby. Session locks nest, so the caller
# takes it only while it does not hold it (WakerRole.held), and gives it up once.
WAKER_TRY_TAKE = Statement("waker_try_take", "SELECT pg_try_advisory_lock(%(key)s::int8)")


def waker_try_take(*, key: int) -> Query[bool]:
    """True when this session now holds the role."""
    return Query(WAKER_TRY_TAKE, {"key": key}, _true)


# Params: key, channel (the queue's role channel). One statement: the lock is free before
# the standbys hear that it is, so the first of them to try gets it. A vacancy wakes every
# process (to claim, and to try for the role).
WAKER_GIVE_UP = Statement(
    "waker_give_up",
    f"SELECT pg_advisory_unlock(%(key)s::int8), pg_notify(%(channel)s, '{WAKER_VACANT}')",
)


def waker_give_up(*, key: int, channel: str) -> Query[bool]:
    """True when this session held the role (and no longer does)."""
    return Query(WAKER_GIVE_UP, {"key": key, "channel": channel}, _true)


# LISTEN and UNLISTEN on one channel: the Listener's set-up on each new session, and the
# role holder's on the queue's hint channel. No params: a channel is an identifier, quoted
# by psycopg.
def listen(channel: str) -> Query[None]:
    return Query(Statement("listen", _on_channel("LISTEN", channel), False), {}, _none)


def unlisten(channel: str) -> Query[None]:
    return Query(Statement("unlisten", _on_channel("UNLISTEN", channel), False), {}, _none)


def _on_channel(command: str, channel: str) -> str:
    return sql.SQL(command + " {}").format(sql.Identifier(channel)).as_string()


def _none(rows: query.Rows, count: int) -> None:
    return None


# Params: none. Run once on each new LISTEN connection. The server ends a session, and
# releases its role, only once it notices the client is gone; over a network that dropped
# silently that takes the server's TCP keepalive, hours by the OS default, and meanwhile no
# other process can take the role (pickup then waits for the standby polls). These settings
# make it notice within about 30 s. Each is set only where the server leaves it at 0 (the
# OS default), so a DBA's or OPTIONS' choice stands; on a Unix socket they do nothing.
WAKER_SESSION_LIVENESS = Statement(
    "waker_session_liveness",
    f"""
SELECT {_set_if_default("tcp_keepalives_idle", "10")},
       {_set_if_default("tcp_keepalives_interval", "5")},
       {_set_if_default("tcp_keepalives_count", "3")},
       {_set_if_default("tcp_user_timeout", "30000")}
""",
)


def waker_session_liveness() -> Query[query.Rows]:
    return Query(WAKER_SESSION_LIVENESS, {}, query.plain)


def _true(rows: query.Rows, count: int) -> bool:
    return bool(rows and rows[0][0])
