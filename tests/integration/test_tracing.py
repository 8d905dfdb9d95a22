"""Trace context across the queue (decision 022), with the OpenTelemetry SDK's in-memory
exporter: `enqueue` stores the enqueuing span's traceparent in the job's metadata, and the
worker's executor runs each attempt in a `job.execute <kind>` span, the child of that span
on the first attempt and a new trace linked to it on a retry. Also the metrics' OpenTelemetry
sink, with the SDK's in-memory reader.

The SDK's providers are process-global and can be set once: this module installs them on
first use; spans only exist where a test opens one, so other tests store nothing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db.models.functions import Now
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import awa_django
from awa_django import tracing
from awa_django.conf import QueueConfig
from awa_django.events import Completed
from awa_django.execution import attempt
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import Job
from awa_django.worker.completer import Completer
from awa_django.worker.database import Database
from awa_django.worker.executor import Executor
from awa_django.worker.hook_queue import HookQueue
from awa_django.worker.inflight import InFlight
from awa_django.worker.metrics import WorkerMetrics
from testproject.testjobs.jobs import AccOutcome
from tests.factories import JobFactory


@functools.cache
def exporter() -> InMemorySpanExporter:
    """The process's tracer provider, exporting into memory (installed once)."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    return spans


@functools.cache
def metric_reader() -> InMemoryMetricReader:
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


@pytest.fixture
def spans() -> InMemorySpanExporter:
    exporter().clear()
    return exporter()


@pytest.mark.django_db
def test_enqueue_stores_the_current_traceparent_and_nothing_without_a_span(spans) -> None:
    tracer = trace.get_tracer("test")
    plain = awa_django.enqueue(AccOutcome("complete"))
    with tracer.start_as_current_span("web request") as request_span:
        traced = awa_django.enqueue(AccOutcome("complete"))
        own = awa_django.enqueue(AccOutcome("complete"), metadata={tracing.METADATA_KEY: "x"})
    context = request_span.get_span_context()
    assert tracing.METADATA_KEY not in plain.metadata
    assert traced.metadata[tracing.METADATA_KEY] == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    )
    assert own.metadata[tracing.METADATA_KEY] == "x"  # the caller's own value is kept


async def run_attempt(job_id: int, metrics_sink: WorkerMetrics | None = None) -> None:
    """Claim `job_id`'s queue and run the attempt in an executor, as the worker does."""
    db = Database("default", "awa-tracing-test", max_size=2)
    await db.open()
    threads = ThreadPoolExecutor(max_workers=1)
    completer = Completer(db, forced=lambda: False)
    flushing = asyncio.ensure_future(completer.run())
    hooks = HookQueue()
    executor = Executor(
        db, completer, InFlight(), threads, hooks, 1024, lambda: False, metrics=metrics_sink
    )
    try:
        (row,) = await db.run(attempt.claim(QueueConfig("acc"), 1, "w-trace"))
        assert row.id == job_id
        await executor.execute(row, lambda: None)
    finally:
        flushing.cancel()
        threads.shutdown(wait=True)
        hooks.close()
        await db.close()


@pytest.mark.django_db(transaction=True)
def test_the_first_attempt_is_a_child_of_the_enqueuing_span_and_a_retry_is_linked(
    spans,
) -> None:
    with trace.get_tracer("test").start_as_current_span("web request") as request_span:
        job = awa_django.enqueue(AccOutcome("retry"))
    enqueuing = request_span.get_span_context()

    asyncio.run(run_attempt(job.id))  # attempt 1 returns RetryAfter
    # Due now, as promotion makes it once its retry delay passed (the delay may not have yet).
    Job.objects.filter(id=job.id).update(state="available", run_at=Now())
    asyncio.run(run_attempt(job.id))  # attempt 2 completes
    assert Job.objects.get(id=job.id).state == "completed"

    first, second = [s for s in spans.get_finished_spans() if s.name.startswith("job.execute")]
    assert first.name == second.name == "job.execute acc_outcome"
    assert first.kind == second.kind == trace.SpanKind.CONSUMER
    assert first.parent is not None and first.parent.span_id == enqueuing.span_id
    assert first.context.trace_id == enqueuing.trace_id
    assert first.attributes is not None and first.attributes["awa.job.outcome"] == "retryable"
    # A retry starts a trace of its own, linked to the enqueuing span.
    assert second.parent is None and second.context.trace_id != enqueuing.trace_id
    assert [link.context.span_id for link in second.links] == [enqueuing.span_id]
    assert second.attributes is not None
    assert {k: second.attributes[k] for k in ("messaging.system", "messaging.message.id")} == {
        "messaging.system": "awa",
        "messaging.message.id": str(job.id),
    }
    assert second.attributes["messaging.destination.name"] == "acc"
    assert second.attributes["messaging.operation.type"] == "process"
    assert second.attributes["awa.job.attempt"] == 2


@pytest.mark.django_db(transaction=True)
def test_a_job_enqueued_outside_any_span_runs_in_a_root_span(spans) -> None:
    job = awa_django.enqueue(AccOutcome("complete"))
    asyncio.run(run_attempt(job.id))
    (span,) = [s for s in spans.get_finished_spans() if s.name.startswith("job.execute")]
    assert span.parent is None and not span.links


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


@pytest.mark.django_db
def test_the_metrics_also_record_through_opentelemetry_when_its_sdk_is_configured() -> None:
    reader = metric_reader()
    assert tracing.meter_configured()
    sink = WorkerMetrics.for_worker(None)  # no Prometheus port: OpenTelemetry alone
    assert sink.enabled and sink.registry is None
    job = JobFactory(kind="acc_outcome", queue="acc")
    row = JobSnapshot.from_mapping(Job.objects.filter(id=job.id).values().get())
    sink.event(Completed(job=row, duration=dt.timedelta(seconds=1)))
    sink.attempt("acc_outcome", "acc", 0.25, 0.5)
    (completed,) = points(reader, "awa.job.completed")
    assert completed.value == 1
    assert dict(completed.attributes) == {"awa.job.kind": "acc_outcome", "awa.job.queue": "acc"}
    (duration,) = points(reader, "awa.job.duration")
    assert (duration.count, duration.sum) == (1, 0.25)
