"""The module-level enqueue functions, `awa_django.enqueue` & co.: each call is one
`Client(using)` call, with the same keyword arguments as the method."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Unpack, overload

from asgiref.sync import sync_to_async

from awa_django.client.client import Client
from awa_django.client.workflow_verbs import GroupResult
from awa_django.client.workflows import Parents
from awa_django.exceptions import InvalidDependency
from awa_django.execution.rows import EnqueueKwargs, EnqueueOptions
from awa_django.snapshot import JobSnapshot
from awa_django.unique import EnqueueManyResult, OnConflict


def enqueue(
    args: Any,
    *,
    using: str | None = None,
    after: Parents | None = None,
    on_parent_failure: str = "cancel",
    **options: Unpack[EnqueueKwargs],
) -> JobSnapshot:
    """Enqueue one job in the current transaction of database `using`. See
    `Client.enqueue` for the options (`after=`, `on_parent_failure=` included) and the
    errors.

        awa_django.enqueue(SendReceipt(order_id=7), queue="email", tags=["vip"])
        awa_django.enqueue(Notify(order_id=7), after=[charge, reserve])
    """
    return Client(using).enqueue(args, after=after, on_parent_failure=on_parent_failure, **options)


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
    after: Parents | None = None,
    on_parent_failure: str = "cancel",
    **options: Unpack[EnqueueKwargs],
) -> JobSnapshot:
    """`enqueue` for async code."""
    return await Client(using).aenqueue(
        args, after=after, on_parent_failure=on_parent_failure, **options
    )


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


# -- workflows (docs/workflows-api.md) ----------------------------------------------------
def chain(
    *jobs: Any, using: str | None = None, on_parent_failure: str = "cancel"
) -> list[JobSnapshot]:
    """Enqueue `jobs` (args instances or `step(...)`s), each after the one before it, in
    one transaction; their rows in order. See `Client.chain`.

        fetch, parse, store = awa_django.chain(Fetch(url), Parse(), Store())
    """
    return Client(using).chain(*jobs, on_parent_failure=on_parent_failure)


@dataclass(frozen=True, slots=True)
class Group:
    """Jobs to enqueue together (`group(...)`); nothing is written until `enqueue()` or
    `then(child)`."""

    jobs: tuple[Any, ...]
    using: str | None = None

    def enqueue(self) -> list[JobSnapshot]:
        """Enqueue the members in one transaction; their rows in order."""
        return Client(self.using).group(*self.jobs)

    def then(self, child: Any, *, on_parent_failure: str = "cancel") -> GroupResult:
        """Enqueue the members and `child`, which waits on all of them, in one
        transaction (fan-out, fan-in).

            flow = awa_django.group(Resize(1), Resize(2)).then(Publish())
            flow.child.id, [m.id for m in flow.members]
        """
        if child is None:  # Client.group(then=None) enqueues the members alone
            raise InvalidDependency("then() takes the child job that waits on the group")
        # `child` is Any, which matches both overloads of Client.group: name the result.
        result: GroupResult = Client(self.using).group(
            *self.jobs, then=child, on_parent_failure=on_parent_failure
        )
        return result


def group(*jobs: Any, using: str | None = None) -> Group:
    """A group of jobs (args instances or `step(...)`s) to enqueue together."""
    return Group(tuple(jobs), using)


def batch(
    jobs: Iterable[Any],
    *,
    on_success: Any | None = None,
    on_complete: Any | None = None,
    using: str | None = None,
) -> int:
    """Enqueue `jobs` as one batch with its callbacks; the batch id. See `Client.batch`."""
    return Client(using).batch(jobs, on_success=on_success, on_complete=on_complete)
