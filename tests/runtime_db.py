"""A runtime `Database` for tests that drive worker services directly (plain code)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from awa_django.storage.query import Query
from awa_django.storage.sql.fragments import EPOCH_SPACE
from awa_django.worker.database import Database, DedicatedConnection

T = TypeVar("T")


def with_db(step: Callable[[Database], Awaitable[T]]) -> T:
    """Run `step` on a fresh runtime Database inside its own event loop."""

    async def main() -> T:
        db = Database("default", "awa-test", max_size=4)
        await db.open()
        try:
            return await step(db)
        finally:
            await db.close()

    return asyncio.run(main())


def first_claim(run_lease: int) -> bool:
    """Whether `run_lease` is what a job's first claim hands out: 1 on Django's connection
    (counted on from 0), `epoch * EPOCH_SPACE` on a worker's (decision 029)."""
    return run_lease == 1 or (run_lease > 0 and run_lease % EPOCH_SPACE == 0)


def count_statements(db: Database) -> list[str]:
    """Record the name of every statement run through `db` from now on: on its pool and on
    its dedicated connections (the claims' and the completer's, decision 031), those it
    has handed out and those it hands out later."""
    seen: list[str] = []

    def counting(runner: Database | DedicatedConnection) -> None:
        run = runner.run

        async def counted(query: Query[T]) -> T:
            seen.append(query.statement.name)
            return await run(query)

        runner.run = counted  # type: ignore[method-assign]

    counting(db)
    for dedicated in db._dedicated:
        counting(dedicated)
    dedicate = db.dedicated

    def dedicated_counting() -> DedicatedConnection:
        dedicated = dedicate()
        counting(dedicated)
        return dedicated

    db.dedicated = dedicated_counting  # type: ignore[method-assign]
    return seen
