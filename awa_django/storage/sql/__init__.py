"""Every hand-written statement on the hot path, by name (DESIGN §3, STYLE §4, §18).

Each module holds the statements of one entity. A statement's text is a `Statement`
constant (upper case) with a comment naming its parameters, the index it relies on and any
planner trap; beside it, one typed function with the statement's name builds the `Query`
that runs it (`query.run(using)` on Django's connection, `await query.arun(conn)` or
`query.run_on(conn)` on the runtime's). Callers never build parameter dicts. Fragments that
several statements share live in `fragments.py`. Everything off the hot path uses the ORM.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Statement:
    name: str
    sql: str
    returns_rows: bool = True
    # Prepared server-side on Django's connection too (see connection.django_cursor): for
    # the enqueue statements, whose planning cost more than their execution (a single
    # enqueue's insert planned 0.3 ms, ran in 0.2). Only statements whose plan does not
    # depend on their parameters' values: a generic plan is chosen after five executions.
    prepared: bool = False

    def __str__(self) -> str:
        return self.name
