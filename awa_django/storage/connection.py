"""Django's connection as the client side of the statement layer: a cursor that joins the
caller's transaction, and the one place where database errors a caller can act on are
translated (`DatabaseUnavailable`, `UniqueConflict`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import DatabaseError, connections

from awa_django.exceptions import DatabaseUnavailable, UniqueConflict

UNIQUE_INDEX = "awa_jobs_unique_idx"  # the partial unique index of unique jobs (0004)


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
        if _unique_violation(getattr(exc, "__cause__", None)):
            # A job moved back into its unique states (retry of a failed job) while a newer
            # job holds its key. Inserts never get here: they skip a held key.
            raise UniqueConflict(
                f"a live job already holds this job's unique key: {exc}".strip()
            ) from exc
        raise


def _unique_violation(error: object) -> bool:
    return (
        isinstance(error, psycopg.errors.UniqueViolation)
        and error.diag.constraint_name == UNIQUE_INDEX
    )


def _unreachable(error: object) -> bool:
    """A lost or refused connection (no SQLSTATE, class 08, or an admin shutdown) — not a
    deadlock, serialization failure or timeout, which are OperationalErrors too."""
    if not isinstance(error, psycopg.OperationalError):
        return False
    state = error.sqlstate or ""
    return not state or state.startswith("08") or state in {"57P01", "57P02", "57P03"}
