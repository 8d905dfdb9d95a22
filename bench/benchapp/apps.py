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


class BenchAppConfig(AppConfig):
    name = "bench.benchapp"
    label = "benchapp"

    def ready(self) -> None:
        # "1"/"async": a coroutine hook; "sync": a blocking one. Unset: no hook, so the
        # plain drain scenarios measure the worker alone.
        mode = os.environ.get("AWA_BENCH_SLOW_HOOK", "")
        if not mode:
            return
        from .jobs import BenchAsync

        hook = slow_sync_hook if mode == "sync" else slow_async_hook
        awa_django.on_event(BenchAsync, hook, events={awa_django.Completed})
