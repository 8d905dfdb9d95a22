"""The module-level enqueue functions, `awa_django.enqueue` & co.: each call is one
`Client(using)` call, with the same keyword arguments as the method."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Unpack, overload

from asgiref.sync import sync_to_async

from awa_django.client.client import Client
from awa_django.execution.rows import EnqueueKwargs, EnqueueOptions
from awa_django.snapshot import JobSnapshot
from awa_django.unique import EnqueueManyResult, OnConflict


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


@overload
def enqueue_many(
    jobs: Iterable[Any],
    *,
    using: str | None = None,
    on_conflict: Literal["raise"] = "raise",
    **options: Unpack[EnqueueKwargs],
) -> list[int]: ...
@overload
def enqueue_many(
    jobs: Iterable[Any],
    *,
    using: str | None = None,
    on_conflict: Literal["skip"],
    **options: Unpack[EnqueueKwargs],
) -> EnqueueManyResult: ...
def enqueue_many(
    jobs: Iterable[Any],
    *,
    using: str | None = None,
    on_conflict: OnConflict = "raise",
    **options: Unpack[EnqueueKwargs],
) -> list[int] | EnqueueManyResult:
    """Enqueue many jobs at COPY speed; their ids in input order. `kind` applies to
    every job (required for dicts). `on_conflict="skip"` skips unique jobs whose key is
    held and returns an EnqueueManyResult. See `Client.enqueue_many`."""
    return Client(using)._enqueue_many(jobs, EnqueueOptions(**options), on_conflict)


async def aenqueue(
    args: Any,
    *,
    using: str | None = None,
    **options: Unpack[EnqueueKwargs],
) -> JobSnapshot:
    """`enqueue` for async code."""
    return await Client(using).aenqueue(args, **options)


@overload
async def aenqueue_many(
    jobs: Iterable[Any],
    *,
    using: str | None = None,
    on_conflict: Literal["raise"] = "raise",
    **options: Unpack[EnqueueKwargs],
) -> list[int]: ...
@overload
async def aenqueue_many(
    jobs: Iterable[Any],
    *,
    using: str | None = None,
    on_conflict: Literal["skip"],
    **options: Unpack[EnqueueKwargs],
) -> EnqueueManyResult: ...
async def aenqueue_many(
    jobs: Iterable[Any],
    *,
    using: str | None = None,
    on_conflict: OnConflict = "raise",
    **options: Unpack[EnqueueKwargs],
) -> list[int] | EnqueueManyResult:
    """`enqueue_many` for async code."""
    client = Client(using)
    return await sync_to_async(client._enqueue_many)(jobs, EnqueueOptions(**options), on_conflict)
