"""Test helpers shared by several test modules (not fixtures: plain code)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from awa_django.worker.database import connection_kwargs


class Listener:
    """A plain psycopg connection LISTENing on channels, like a worker's listener."""

    def __init__(self, *channels: str) -> None:
        self.conn = psycopg.connect(**connection_kwargs("default", "awa-core-test-listen"))
        for channel in channels:
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    def next(self, timeout: float = 5.0) -> psycopg.Notify | None:
        for notify in self.conn.notifies(timeout=timeout, stop_after=1):
            return notify
        return None

    def assert_nothing_pending(self, channel: str) -> None:
        """Notifications arrive in commit order: if a marker sent now is the first thing
        heard, nothing committed earlier was sent to `channel`."""
        with psycopg.connect(**connection_kwargs("default", "awa-core-test-marker")) as other:
            other.execute("SELECT pg_notify(%s, 'marker')", [channel])
        first = self.next()
        assert first is not None and (first.channel, first.payload) == (channel, "marker")

    def close(self) -> None:
        self.conn.close()
