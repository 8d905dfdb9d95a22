"""`async_twin`: the `a`-prefixed async twin of a Client verb, written once (Django's
convention: `aget_job` is `get_job` for async code, run through `sync_to_async` so the ORM
and the caller's connection are used from a thread, as Django's own async ORM does)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from asgiref.sync import sync_to_async

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def async_twin(
    verb: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """`verb` for async code, with the same parameters (mypy and editors see them)."""

    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await sync_to_async(verb)(self, *args, **kwargs)

    twin.__name__ = f"a{verb.__name__}"
    twin.__qualname__ = verb.__qualname__.replace(verb.__name__, twin.__name__)
    twin.__doc__ = f"`{verb.__name__}` for async code."
    return twin
