"""Django's connection as the client side of the statement layer: a cursor that joins the
caller's transaction, and the one place where database errors a caller can act on are
translated (`DatabaseUnavailable`, `UniqueConflict`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from django.db import DatabaseError, connections

from awa_django.exceptions import DatabaseUnavailable, UniqueConflict

if TYPE_CHECKING:
    from psycopg._queries import PostgresQuery

UNIQUE_INDEX = "awa_jobs_unique_idx"  # the partial unique index of unique jobs (0004)


@contextmanager
def django_cursor(using: str, *, prepare: bool = False) -> Iterator[Any]:
    """A cursor on Django's connection `using` (so it joins the caller's transaction) that
    binds parameters server-side, as the runtime does: the named statements were written
    for it, and bulk arrays then travel as parameters instead of being quoted into the SQL
    text. It is still Django's cursor wrapper, so query logging, execute wrappers and
    assertNumQueries see every statement. `prepare`: its statements are prepared
    server-side (once per connection), unless `using` cannot keep prepared statements."""
    wrapper = connections[using]
    try:
        # What Django's cursor() does before creating one (async-safety, health check,
        # connect, thread check); CursorWrapper.execute adds the broken-transaction check.
        wrapper.close_if_health_check_failed()
        wrapper.ensure_connection()
        wrapper.validate_thread_sharing()
        # A connection shared across threads (inc_thread_sharing) gets a cursor per call.
        if prepare and keeps_prepared(using) and not wrapper.allow_thread_sharing:
            raw = PreparingCursor.lend(wrapper)
            try:
                yield _wrapped(wrapper, raw)
            finally:
                raw.give_back(wrapper)
        else:
            with _wrapped(wrapper, psycopg.Cursor(wrapper.connection)) as cursor:
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


def _wrapped(wrapper: Any, raw: psycopg.Cursor[Any]) -> Any:
    """`raw` in Django's cursor wrapper (the stubs say make_cursor takes its own cursors
    only; it wraps any DB-API cursor)."""
    return wrapper.make_debug_cursor(raw) if wrapper.queries_logged else wrapper.make_cursor(raw)


def keeps_prepared(using: str) -> bool:
    """Whether statements prepared on `using`'s connection can be used again, as the
    runtime decides for its own connections (worker/database.py): not behind a transaction
    pooler (Django's DISABLE_SERVER_SIDE_CURSORS says there is one; the next transaction
    may run on another server connection, PgBouncer < 1.21), unless OPTIONS sets
    `prepare_threshold` (then: unless it is None)."""
    settings = connections[using].settings_dict
    options = settings.get("OPTIONS", {})
    if "prepare_threshold" in options:
        return options["prepare_threshold"] is not None
    return not settings.get("DISABLE_SERVER_SIDE_CURSORS")


# The attribute of Django's connection wrapper that keeps its PreparingCursor.
_KEPT = "_awa_preparing_cursor"

# Lifted to this while a PreparingCursor executes: high enough that no statement is ever
# prepared for being seen often, only because it asked to be.
_ONLY_WHEN_ASKED = 2**31 - 1


class PreparingCursor(psycopg.Cursor[Any]):
    """A cursor whose statements are prepared server-side on first use and then executed
    by name: no parsing or planning per call. Django leaves `prepare_threshold` None on its
    connections (nothing is prepared) unless OPTIONS sets it; this cursor lifts it for its
    own execute only, so the application's queries are never prepared behind its back,
    while psycopg still keeps the statement's name for the connection's lifetime.

    One is kept per connection and lent to each prepared statement in turn (`lend`): a new
    cursor starts with no parameter dumpers and looks each one up again, which with its
    creation was about a tenth of a single enqueue's CPU. Its last statement's parameters
    and rows are dropped when the loan ends."""

    lent = False

    @classmethod
    def lend(cls, wrapper: Any) -> PreparingCursor:
        """The cursor kept on Django's connection `wrapper`, or a new one while that one is
        lent (a statement run from inside another's execute wrapper). Kept on the wrapper,
        not the psycopg connection: a cursor refers to its connection, so a map from
        connections to cursors would keep every closed connection alive."""
        conn = wrapper.connection
        kept: PreparingCursor | None = getattr(wrapper, _KEPT, None)
        if kept is None or kept.connection is not conn:
            kept = cls(conn)
            setattr(wrapper, _KEPT, kept)
        elif kept.lent:
            kept = cls(conn)
        kept.lent = True
        return kept

    def give_back(self, wrapper: Any) -> None:
        """End the loan (a cursor made only for it is closed). The kept one forgets the
        statement's parameters and result (an enqueue_many's can be megabytes of args);
        its adaptation cache, what the reuse is for, stays."""
        self.lent = False
        if getattr(wrapper, _KEPT, None) is not self:
            self.close()
        else:
            self._reset()

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: Any = None
    ) -> PreparingCursor:
        conn = self.connection
        if conn.prepare_threshold is not None:
            super().execute(query, params, prepare=True, binary=binary)
            return self
        conn.prepare_threshold = _ONLY_WHEN_ASKED
        try:
            super().execute(query, params, prepare=True, binary=binary)
        finally:
            conn.prepare_threshold = None
        return self

    def _send_query_prepared(
        self, name: bytes, pgq: PostgresQuery, *, binary: bool | None = None
    ) -> None:
        # psycopg records the query it ran (`_query`) only when it sends it unprepared, and
        # Django's query log (last_executed_query: DEBUG logging, assertNumQueries) reads it
        # from there; without it the log would show the parameters' reprs instead.
        self._query = pgq
        super()._send_query_prepared(name, pgq, binary=binary)


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
