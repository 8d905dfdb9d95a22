"""W3C trace context across the queue, through the OpenTelemetry API when it is installed
(decision 022): `enqueue` stores the current `traceparent` in the job's metadata under
`awa:traceparent` (Awa's key), and the worker runs each attempt in a `job.execute <kind>`
span — a child of the enqueuing span on the first attempt, a new trace linked to it on
retries (Awa ADR-039), with the messaging semantic conventions' attributes.

Without OpenTelemetry installed nothing is imported and nothing is stored: `available()`
asks the import system once, and every function returns at once when it says no.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator, Mapping
from typing import Any

METADATA_KEY = "awa:traceparent"
SPAN_PREFIX = "job.execute"


@functools.cache
def available() -> bool:
    """Whether the OpenTelemetry API can be imported (asked once per process)."""
    return importlib.util.find_spec("opentelemetry") is not None


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the current span, or None (no OpenTelemetry, no tracer
    provider configured, or no span recording)."""
    if not available():
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def with_traceparent(metadata: dict[str, Any]) -> dict[str, Any]:
    """`metadata` with the current traceparent added (the same dict when there is none,
    or when the caller set the key themselves)."""
    parent = current_traceparent()
    if parent is None or METADATA_KEY in metadata:
        return metadata
    return {**metadata, METADATA_KEY: parent}


@functools.cache
def _trace_api() -> Any:
    from opentelemetry import trace

    return trace


def tracer_configured() -> bool:
    """A real tracer provider is installed (not the API's proxy or no-op default). Asked
    per attempt, so the API module is looked up once, not imported each time."""
    if not available():
        return False
    provider = _trace_api().get_tracer_provider()
    return type(provider).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider")


def meter_configured() -> bool:
    """A real meter provider is installed (the OpenTelemetry SDK, configured)."""
    if not available():
        return False
    from opentelemetry import metrics

    provider = metrics.get_meter_provider()
    return type(provider).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")


def meter() -> Any:
    from opentelemetry import metrics

    return metrics.get_meter("awa_django")


def attempt_span(
    kind: str, queue: str, job_id: int, attempt: int, metadata: Mapping[str, Any]
) -> contextlib.AbstractContextManager[Any]:
    """The span of one attempt, current inside the block (None without a tracer: then a
    bare nullcontext, the only cost every untraced attempt pays)."""
    if not tracer_configured():
        return contextlib.nullcontext()
    return _attempt_span(kind, queue, job_id, attempt, metadata)


@contextlib.contextmanager
def _attempt_span(
    kind: str, queue: str, job_id: int, attempt: int, metadata: Mapping[str, Any]
) -> Iterator[Any]:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = metadata.get(METADATA_KEY)
    enqueued = (
        TraceContextTextMapPropagator().extract({"traceparent": parent})
        if isinstance(parent, str)
        else None
    )
    links: list[trace.Link] = []
    if enqueued is not None and attempt > 1:
        # A retry starts its own trace, linked to the producer's (Awa ADR-039): one trace
        # per attempt keeps a 25-attempt job from growing one endless trace.
        links = [trace.Link(trace.get_current_span(enqueued).get_span_context())]
        enqueued = otel_context.Context()
    with _tracer(trace.get_tracer_provider()).start_as_current_span(
        f"{SPAN_PREFIX} {kind}",
        context=enqueued if enqueued is not None else otel_context.Context(),
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "awa",
            "messaging.operation.type": "process",
            "messaging.operation.name": SPAN_PREFIX,
            "messaging.destination.name": queue,
            "messaging.message.id": str(job_id),
            "awa.job.kind": kind,
            "awa.job.attempt": attempt,
        },
    ) as span:
        yield span


@functools.lru_cache(maxsize=4)
def _tracer(provider: Any) -> Any:
    """The package's tracer of `provider`, made once (the SDK builds a new one per call);
    keyed by the provider, so a test that installs another gets its own."""
    return provider.get_tracer("awa_django")


def mark_outcome(span: Any, state: str | None, error: str | None) -> None:
    """Record the attempt's planned outcome on its span (an error sets the ERROR status)."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("awa.job.outcome", state or "completed")
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:500]))
