"""The module-level enqueue functions, `awa_django.enqueue` & co.: each call is one
`Client(using)` call, with the same keyword arguments as the method."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from awa_django.client.client import Client
from awa_django.snapshot import JobSnapshot


def enqueue(
    args: Any,
    *,
    kind: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_at: dt.datetime | None = None,
    max_attempts: int | None = None,
    tags: Sequence[str] = (),
    metadata: dict[str, Any] | None = None,
    using: str | None = None,
) -> JobSnapshot:
    """Enqueue one job in the current transaction of database `using`. See
    `Client.enqueue` for the options and the errors.

        awa_django.enqueue(SendReceipt(order_id=7), queue="email", tags=["vip"])
    """
    return Client(using).enqueue(
        args,
        kind=kind,
        queue=queue,
        priority=priority,
        run_at=run_at,
        max_attempts=max_attempts,
        tags=tags,
        metadata=metadata,
    )


def enqueue_many(
    jobs: Iterable[Any],
    *,
    kind: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_at: dt.datetime | None = None,
    max_attempts: int | None = None,
    tags: Sequence[str] = (),
    metadata: dict[str, Any] | None = None,
    using: str | None = None,
) -> list[int]:
    """Enqueue many jobs in one statement; their ids in input order. `kind` applies to
    every job (required for dicts). See `Client.enqueue_many`."""
    return Client(using).enqueue_many(
        jobs,
        kind=kind,
        queue=queue,
        priority=priority,
        run_at=run_at,
        max_attempts=max_attempts,
        tags=tags,
        metadata=metadata,
    )


async def aenqueue(
    args: Any,
    *,
    kind: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_at: dt.datetime | None = None,
    max_attempts: int | None = None,
    tags: Sequence[str] = (),
    metadata: dict[str, Any] | None = None,
    using: str | None = None,
) -> JobSnapshot:
    """`enqueue` for async code."""
    return await Client(using).aenqueue(
        args,
        kind=kind,
        queue=queue,
        priority=priority,
        run_at=run_at,
        max_attempts=max_attempts,
        tags=tags,
        metadata=metadata,
    )


async def aenqueue_many(
    jobs: Iterable[Any],
    *,
    kind: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_at: dt.datetime | None = None,
    max_attempts: int | None = None,
    tags: Sequence[str] = (),
    metadata: dict[str, Any] | None = None,
    using: str | None = None,
) -> list[int]:
    """`enqueue_many` for async code."""
    return await Client(using).aenqueue_many(
        jobs,
        kind=kind,
        queue=queue,
        priority=priority,
        run_at=run_at,
        max_attempts=max_attempts,
        tags=tags,
        metadata=metadata,
    )
