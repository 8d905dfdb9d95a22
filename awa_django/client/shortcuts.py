"""The module-level enqueue functions, `awa_django.enqueue` & co.: each call is one
`Client(using)` call, with the same keyword arguments as the method."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Unpack

from awa_django.client.client import Client
from awa_django.client.rows import EnqueueKwargs
from awa_django.snapshot import JobSnapshot


def enqueue(
    args: Any,
    *,
    using: str | None = None,
    **options: Unpack[EnqueueKwargs],
) -> JobSnapshot:
    """Enqueue one job in the current transaction of database `using`. See
    `Client.enqueue` for the options and the errors.

        awa_django.enqueue(SendReceipt(order_id=7), queue="email", tags=["vip"])
    """
    return Client(using).enqueue(args, **options)


def enqueue_many(
    jobs: Iterable[Any],
    *,
    using: str | None = None,
    **options: Unpack[EnqueueKwargs],
) -> list[int]:
    """Enqueue many jobs in one statement; their ids in input order. `kind` applies to
    every job (required for dicts). See `Client.enqueue_many`."""
    return Client(using).enqueue_many(jobs, **options)


async def aenqueue(
    args: Any,
    *,
    using: str | None = None,
    **options: Unpack[EnqueueKwargs],
) -> JobSnapshot:
    """`enqueue` for async code."""
    return await Client(using).aenqueue(args, **options)


async def aenqueue_many(
    jobs: Iterable[Any],
    *,
    using: str | None = None,
    **options: Unpack[EnqueueKwargs],
) -> list[int]:
    """`enqueue_many` for async code."""
    return await Client(using).aenqueue_many(jobs, **options)
