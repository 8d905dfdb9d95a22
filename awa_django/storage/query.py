"""`Query[T]`: one named statement bound to its typed parameters, runnable on every side.

The sql modules build queries through one typed function per statement; this module runs
them: on Django's connection (`run`, joins the caller's transaction), on a runtime psycopg
connection (`arun`, autocommit) or on the heartbeat thread's synchronous one (`run_on`).
`read` turns the result rows into what the statement's function promises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import psycopg

from awa_django.snapshot import JobSnapshot
from awa_django.storage.connection import django_cursor
from awa_django.storage.sql import Statement

T = TypeVar("T")
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Query(Generic[T]):
    statement: Statement
    params: Mapping[str, Any]
    read: Callable[[Rows, int], T]

    def run(self, using: str) -> T:
        """Run on Django's connection `using`, inside the caller's transaction if any."""
        with django_cursor(using, prepare=self.statement.prepared) as cursor:
            cursor.execute(self.statement.sql, self.params)
            rows = cursor.fetchall() if self.statement.returns_rows else []
            return self.read(rows, cursor.rowcount)

    def run_on(self, conn: psycopg.Connection[Any]) -> T:
        """Run on a synchronous runtime connection (the heartbeat thread's)."""
        with conn.cursor() as cursor:
            cursor.execute(self.statement.sql, self.params)
            rows = cursor.fetchall() if self.statement.returns_rows else []
            return self.read(rows, cursor.rowcount)

    async def arun(self, conn: psycopg.AsyncConnection[Any]) -> T:
        """Run on an asynchronous runtime connection (autocommit)."""
        async with conn.cursor() as cursor:
            await cursor.execute(self.statement.sql, self.params)
            rows = await cursor.fetchall() if self.statement.returns_rows else []
            return self.read(rows, cursor.rowcount)


# -- readers: what a statement's rows become ---------------------------------------------
def jobs(rows: Rows, count: int) -> list[JobSnapshot]:
    """Rows that start with fragments.JOB_COLUMNS, read by position (the hot path)."""
    return [JobSnapshot.from_row(row) for row in rows]


def first_job(rows: Rows, count: int) -> JobSnapshot | None:
    return JobSnapshot.from_row(rows[0]) if rows else None


def plain(rows: Rows, count: int) -> Rows:
    return rows


def first(rows: Rows, count: int) -> tuple[Any, ...] | None:
    return rows[0] if rows else None


def rowcount(rows: Rows, count: int) -> int:
    return count


def matched(rows: Rows, count: int) -> bool:
    """True when the statement returned (or touched) at least one row."""
    return bool(rows) or count > 0
