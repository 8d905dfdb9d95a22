"""The worker's way out after the grace: every step is bounded by one deadline."""

from __future__ import annotations

import asyncio
import time

from awa_django.worker.runtime import _bounded


def test_a_step_that_is_slow_to_honour_its_cancellation_does_not_hold_the_exit() -> None:
    """psycopg answers the cancellation of a statement on a silent server by cancelling it
    in the server and waiting for that, up to 5 + 5 s: the exit must not wait for it."""
    cleaned_up = False

    async def statement_on_a_silent_server() -> None:
        nonlocal cleaned_up
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(10)
            cleaned_up = True
            raise

    async def scenario() -> float:
        began = time.monotonic()
        await _bounded(statement_on_a_silent_server(), began + 0.2, "a statement")
        return time.monotonic() - began

    took = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert took < 1.0 and not cleaned_up


def test_a_step_that_ends_in_time_gives_its_result_or_its_error() -> None:
    async def fails() -> None:
        raise ValueError("refused")

    async def scenario() -> str:
        try:
            await _bounded(fails(), time.monotonic() + 5, "a step")
        except ValueError as exc:
            return str(exc)
        return "no error"

    assert asyncio.run(scenario()) == "refused"
