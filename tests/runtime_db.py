"""A runtime `Database` for tests that drive worker services directly (plain code)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from awa_django.storage.sql.fragments import EPOCH_SPACE
from awa_django.worker.database import Database

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
