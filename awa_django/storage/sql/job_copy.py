"""The COPY path of `enqueue_many`: rows written to `awa_jobs_hot` with `COPY ... FROM
STDIN` instead of an INSERT over unnest() arrays (decision 026).

COPY cannot return ids or call pg_notify, so one statement first draws the ids from the
table's sequence (in input order, as the INSERT's would be), reads the database clock and
sends the wake-up NOTIFY; the COPY then writes the rows with those ids. Both run in one
transaction (the caller's, or one of their own), so the NOTIFY is still delivered only if
the rows commit. COPY knows no ON CONFLICT: unique jobs keep job_insert_many_unique.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from django.db import connections

from awa_django.storage import query
from awa_django.storage.connection import django_cursor
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.fragments import NOTIFY_ONCE

# Params: count (rows about to be copied), channels text[] (distinct, empty when no row is
# available). Returns one row: the ids int8[] (drawn in order) and now(), the transaction's
# clock, which the rows take as created_at and, unless scheduled, run_at (what the INSERT's
# now() gives them). Index: none; nextval logs one WAL record per 32 values.
JOB_RESERVE_IDS = Statement(
    "job_reserve_ids",
    f"""
SELECT array_agg(nextval('awa_jobs_hot_id_seq'::regclass)), now()
FROM generate_series(1, %(count)s::int)
WHERE {NOTIFY_ONCE}
""",
    prepared=True,
)


def job_reserve_ids(*, count: int, channels: Sequence[str]) -> Query[tuple[list[int], dt.datetime]]:
    """`count` new job ids in ascending order and the database's now(); NOTIFY `channels`
    (delivered at commit)."""
    return Query(JOB_RESERVE_IDS, {"count": count, "channels": list(channels)}, _reserved)


def _reserved(rows: query.Rows, count: int) -> tuple[list[int], dt.datetime]:
    ids, now = rows[0]
    return list(ids or []), now


# Every column but args and id is the same for the rows of one template, so each row's
# line is its template's prefix (formatted once), then its id and args.
_COPY_COLUMNS = (
    "kind, queue, state, priority, max_attempts, run_at, created_at, metadata, tags, "
    "attempt, run_lease, errors, attempted_by, id, args"
)
# Text format: tab-separated, \N for NULL, backslash escapes (none of the columns is NULL).
# Index: every index of awa_jobs_hot is maintained as by the INSERT (the floor's cost).
JOB_COPY_MANY = Statement("job_copy_many", f"COPY awa_jobs_hot ({_COPY_COLUMNS}) FROM STDIN")


class CopyTemplate(Protocol):
    """The columns that the rows of one enqueue_many template share (execution/rows.py's
    JobTemplate)."""

    @property
    def kind(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def run_at(self) -> dt.datetime | None: ...
    @property
    def metadata(self) -> str: ...
    @property
    def tags(self) -> list[str]: ...


def job_copy_many(
    using: str, rows: Sequence[tuple[CopyTemplate, str]], channels: Sequence[str]
) -> list[int]:
    """Write `rows` (each a template and its args as JSON text) on Django's connection
    `using`, in the caller's transaction if there is one (else in one of their own); return
    their ids in input order. Every value must have been checked (rows.py): a COPY that
    fails aborts the transaction, as a failed INSERT would."""
    ids, now = job_reserve_ids(count=len(rows), channels=channels).run(using)
    _copy(using, _lines(rows, ids, now))
    return ids


def _lines(
    rows: Sequence[tuple[CopyTemplate, str]], ids: list[int], now: dt.datetime
) -> Iterator[str]:
    """The COPY text of `rows`, a few thousand lines per piece: PostgreSQL inserts the
    first while the next are formatted."""
    prefixes: dict[int, str] = {}
    for start in range(0, len(rows), _LINES_PER_WRITE):
        lines = []
        for (template, args), job_id in zip(
            rows[start : start + _LINES_PER_WRITE],
            ids[start : start + _LINES_PER_WRITE],
            strict=True,  # job_reserve_ids drew one id per row
        ):
            prefix = prefixes.get(id(template))
            if prefix is None:
                prefix = prefixes[id(template)] = _prefix(template, now)
            # Args are JSON from the codec: ASCII, control characters escaped, so a
            # backslash is the only character COPY's text format would read as special.
            lines.append(f"{prefix}{job_id}\t{args.replace('\\', '\\\\')}\n")
        yield "".join(lines)


_LINES_PER_WRITE = 5000


def _prefix(template: CopyTemplate, now: dt.datetime) -> str:
    """The columns before `id` of a template's rows, tab-terminated, as COPY text."""
    created = now.isoformat()
    run_at = created if template.run_at is None else template.run_at.isoformat()
    values = (
        _text(template.kind),
        _text(template.queue),
        template.state,
        str(template.priority),
        str(template.max_attempts),
        run_at,
        created,
        _text(template.metadata),
        _text(_array(template.tags)),
        "0",  # attempt
        "0",  # run_lease
        "[]",  # errors
        "{}",  # attempted_by
    )
    return "\t".join(values) + "\t"


def _array(items: Sequence[str]) -> str:
    """A PostgreSQL array literal of texts, every element quoted."""
    quoted = (item.replace("\\", "\\\\").replace('"', '\\"') for item in items)
    return "{" + ",".join(f'"{item}"' for item in quoted) + "}"


def _text(value: str) -> str:
    """`value` as one field of COPY's text format (kinds, tags and metadata may hold any
    storable character, tabs and newlines included)."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def _copy(using: str, pieces: Iterable[str]) -> None:
    """COPY `data` into awa_jobs_hot on Django's connection. Django's cursor wrapper has no
    COPY, so its error translation is applied here (execute wrappers and the query log do
    not see the COPY; they see job_reserve_ids just before it)."""
    wrapper = connections[using]
    with django_cursor(using) as cursor, wrapper.wrap_database_errors:
        raw: Any = cursor.cursor
        with raw.copy(JOB_COPY_MANY.sql) as copy:
            for piece in pieces:
                copy.write(piece)
