"""The named statements of `awa_django/storage/sql/wakers.py` (the waker role's advisory
locks) run against real PostgreSQL.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import pytest
from django.db import connection

from awa_django.channels import role_channel_for
from awa_django.storage.sql import wakers as wakers_sql
from tests.integration.sql_helpers import (
    Q,
    run,
)

pytestmark = pytest.mark.django_db


# -- waker role ---------------------------------------------------------------------------
def role_locks(key: int) -> int:
    """This session's hold count of the advisory lock `key` (a bigint key is two int4s)."""
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND pid = pg_backend_pid() AND classid::int8 = %s AND objid::int8 = %s "
            "AND objsubid = 1",
            [unsigned >> 32, unsigned & 0xFFFFFFFF],
        )
        return int(cursor.fetchone()[0])


def test_waker_try_take_and_waker_give_up_hold_the_role_in_this_session() -> None:
    key = wakers_sql.waker_key(Q)
    assert key != wakers_sql.waker_key(Q + "x")
    assert -(2**63) <= key < 2**63  # a PostgreSQL bigint
    try:
        assert run(wakers_sql.waker_try_take, key=key) is True
        assert role_locks(key) == 1
        # The lock is the session's: a second session would not get it (the acceptance and
        # role tests show that); the holder gives it up once and holds nothing after.
        assert run(wakers_sql.waker_give_up, key=key, channel=role_channel_for(Q)) is True
        assert role_locks(key) == 0
        assert run(wakers_sql.waker_give_up, key=key, channel=role_channel_for(Q)) is False
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_all()")  # never outlive the test


def test_waker_session_liveness_sets_only_what_the_server_left_at_zero() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('tcp_keepalives_idle')")
        (idle_before,) = cursor.fetchone()
        cursor.execute("SET LOCAL tcp_keepalives_count = 7")  # a DBA's choice stands
        run(wakers_sql.waker_session_liveness)  # rolled back with the test's transaction
        cursor.execute(
            "SELECT current_setting('tcp_keepalives_idle'), "
            "current_setting('tcp_keepalives_count'), inet_client_port() IS NULL"
        )
        idle, count, unix_socket = cursor.fetchone()
    # On a Unix socket the server ignores keepalives (and reads them as 0).
    if unix_socket:
        assert (idle, count) == ("0", "0")
    else:
        assert (idle, count) == ("10" if idle_before == "0" else idle_before, "7")
