"""Runs the named statements of `sql/` on either side of the system.

The client side runs them on Django's connection (so they join the caller's transaction);
the runtime runs them on its own psycopg connections. Both get `JobSnapshot`s back. Database
errors that a caller can act on are translated here, in one place.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import DatabaseError, connections

from awa_django.exceptions import DatabaseUnavailable
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import Statement

Params = Mapping[str, Any]


def _rows_to_jobs(rows: list[tuple[Any, ...]]) -> list[JobSnapshot]:
    # Every statement that returns jobs starts its select list with RETURNING_COLUMNS, in
    # JobSnapshot order, so rows are read by position (no per-call cursor.description).
    return [JobSnapshot.from_row(row) for row in rows]


# -- client side: Django's connection ----------------------------------------------------
@contextmanager
def django_cursor(using: str) -> Iterator[Any]:
    """A cursor on Django's connection `using` (so it joins the caller's transaction) that
    binds parameters server-side, as the runtime does: the named statements were written
    for it, and bulk arrays then travel as parameters instead of being quoted into the SQL
    text. It is still Django's cursor wrapper, so query logging, execute wrappers and
    assertNumQueries see every statement."""
    wrapper = connections[using]
    try:
        # What Django's cursor() does before creating one (async-safety, health check,
        # connect); CursorWrapper.execute adds the thread and broken-transaction checks.
        wrapper.close_if_health_check_failed()
        wrapper.ensure_connection()
        # Django's make_cursor/make_debug_cursor wrap any DB-API cursor (the stubs say
        # CursorWrapper only).
        raw: Any = psycopg.Cursor(wrapper.connection)
        cursor = (
            wrapper.make_debug_cursor(raw) if wrapper.queries_logged else wrapper.make_cursor(raw)
        )
        with cursor:
            yield cursor
    except DatabaseError as exc:
        if _unreachable(getattr(exc, "__cause__", None)):
            raise DatabaseUnavailable(f"database {using!r} is unavailable: {exc}") from exc
        raise


def _unreachable(error: object) -> bool:
    """A lost or refused connection (no SQLSTATE, class 08, or an admin shutdown) — not a
    deadlock, serialization failure or timeout, which are OperationalErrors too."""
    if not isinstance(error, psycopg.OperationalError):
        return False
    state = error.sqlstate or ""
    return not state or state.startswith("08") or state in {"57P01", "57P02", "57P03"}


def fetch_jobs(using: str, statement: Statement, params: Params) -> list[JobSnapshot]:
    """Run a statement that returns job rows, on Django's connection `using`."""
    with django_cursor(using) as cursor:
        cursor.execute(statement.sql, params)
        return _rows_to_jobs(cursor.fetchall())


def fetch_rows(using: str, statement: Statement, params: Params) -> list[tuple[Any, ...]]:
    """Run a statement on Django's connection `using`; its plain result rows."""
    with django_cursor(using) as cursor:
        cursor.execute(statement.sql, params)
        return cursor.fetchall() if cursor.description else []


# -- runtime side: the worker's psycopg connections --------------------------------------
async def afetch_jobs(
    conn: psycopg.AsyncConnection[Any], statement: Statement, params: Params
) -> list[JobSnapshot]:
    """Run a statement that returns job rows on a runtime connection (autocommit)."""
    async with conn.cursor() as cursor:
        await cursor.execute(statement.sql, params)
        return _rows_to_jobs(await cursor.fetchall())


async def afetch_rows(
    conn: psycopg.AsyncConnection[Any], statement: Statement, params: Params
) -> list[tuple[Any, ...]]:
    async with conn.cursor() as cursor:
        await cursor.execute(statement.sql, params)
        return await cursor.fetchall() if cursor.description else []
