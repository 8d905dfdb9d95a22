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
        if os.environ.get("AWA_BENCH_OTEL") == "1":
            _install_opentelemetry()
        # "1"/"async": a coroutine hook; "sync": a blocking one; "noop": a hook that does
        # nothing (the cost of dispatching alone). Unset: no hook, so the plain drain
        # scenarios measure the worker alone.
        mode = os.environ.get("AWA_BENCH_SLOW_HOOK", "")
        if not mode:
            return
        from .jobs import BenchAsync

        awa_django.on_event(BenchAsync, HOOKS[mode], events={awa_django.Completed})


def _install_opentelemetry() -> None:
    """The drain_observed scenario: a real SDK tracer and meter provider, so every attempt
    records a span and every instrument records through OpenTelemetry too. Spans go to a
    processor that drops them (the cost measured is the worker's, not an exporter's)."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
