"""A runtime `Database` for tests that drive worker services directly (plain code)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

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
