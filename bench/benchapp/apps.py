"""Registers the slow lifecycle hook (issue 3) when `AWA_BENCH_SLOW_HOOK` asks for it."""

from __future__ import annotations

import asyncio
import os
import time

from django.apps import AppConfig

import awa_django

SLOW_HOOK_SECONDS = 5.0


async def slow_async_hook(event: awa_django.Completed) -> None:
    await asyncio.sleep(SLOW_HOOK_SECONDS)


def slow_sync_hook(event: awa_django.Completed) -> None:
    time.sleep(SLOW_HOOK_SECONDS)


async def noop_hook(event: awa_django.Completed) -> None:
    return None


HOOKS = {"async": slow_async_hook, "1": slow_async_hook, "sync": slow_sync_hook, "noop": noop_hook}


class BenchAppConfig(AppConfig):
    name = "bench.benchapp"
    label = "benchapp"

    def ready(self) -> None:
        # "1"/"async": a coroutine hook; "sync": a blocking one; "noop": a hook that does
        # nothing (the cost of dispatching alone). Unset: no hook, so the plain drain
        # scenarios measure the worker alone.
        mode = os.environ.get("AWA_BENCH_SLOW_HOOK", "")
        if not mode:
            return
        from .jobs import BenchAsync

        awa_django.on_event(BenchAsync, HOOKS[mode], events={awa_django.Completed})
