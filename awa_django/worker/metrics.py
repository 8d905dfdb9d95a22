"""The worker's instruments, named after Awa's (`awa.job.completed` → Prometheus
`awa_job_completed_total`), counted in-process: no SQL per job (decision 021).

`WorkerMetrics` feeds two optional sinks: a private prometheus-client registry (served by
worker/health.py when `awa_worker --metrics-port` is given) and, when the OpenTelemetry
SDK is installed and a meter provider configured, the OpenTelemetry metrics API. With
neither, `WorkerMetrics.disabled()` is a null object: every call returns at once.

Outcome counters are fed from the committed events the executor emits (`Completed`,
`Retried`, `Exhausted`, `Cancelled`, `Rescued`), so they equal the outcomes the database
holds: a stale outcome emits nothing and counts nothing.
"""

from __future__ import annotations

import bisect
import importlib.util
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from awa_django import tracing
from awa_django.conf import DEFAULT_METRICS_MAX_KINDS
from awa_django.events import Cancelled, Completed, Event, Exhausted, Rescued, Retried
from awa_django.exceptions import MetricsUnavailable
from awa_django.registry import registry

# Seconds; one set for job durations and waits, one for the short internal steps.
JOB_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)
SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 512)

# The label value every kind past AWA["METRICS_MAX_KINDS"], or without a handler in this
# worker, is counted under.
OTHER_KIND = "other"
MAX_KINDS = DEFAULT_METRICS_MAX_KINDS
# How many kinds' decisions are remembered; kinds past it are OTHER_KIND without a lookup.
KIND_MEMORY = 10_000


def _handled(kind: str) -> bool:
    """Whether this worker has a handler for `kind` (a django.tasks path is resolved: the
    attempt that is being counted has imported it already)."""
    if registry.declared(kind) is not None:
        return True
    return registry.resolves_on_demand and registry.job(kind) is not None


_OUTCOMES: dict[type[Event], str] = {
    Completed: "completed",
    Retried: "retried",
    Exhausted: "failed",
    Cancelled: "cancelled",
}


def prometheus_available() -> bool:
    return importlib.util.find_spec("prometheus_client") is not None


class WorkerMetrics:
    """Every instrument of one worker process. Construct with `prometheus=True` to export
    Prometheus text (`render()`), `otel=True` to record through OpenTelemetry too."""

    def __init__(
        self, *, prometheus: bool = False, otel: bool = False, max_kinds: int = MAX_KINDS
    ) -> None:
        self.enabled = prometheus or otel
        # Kinds become label values only while they are few and this worker has them:
        # any other kind counts under `kind="other"` (AWA["METRICS_MAX_KINDS"]), so a
        # producer's typos or a flood of unknown kinds cannot blow up every scrape.
        self.max_kinds = max_kinds
        self._kind_labels: dict[str, str] = {}
        self._kinds_named = 0
        self.registry: Any = None
        self._otel: dict[str, Any] = {}
        self._otel_attributes: dict[tuple[str, tuple[str, ...]], dict[str, str]] = {}
        # The Prometheus side keeps plain numbers, turned into metric families only when
        # scraped: a job pays a dict lookup and an increment, no lock (prometheus-client's
        # own instruments take one per sample). Keys: (instrument name, label values).
        self._counts: dict[tuple[str, tuple[str, ...]], float] = {}
        self._series: dict[tuple[str, tuple[str, ...]], _Histogram] = {}
        # Read at scrape time (worker/runtime.py sets them): no bookkeeping per job.
        self.in_flight: Callable[[], dict[str, int]] = dict
        self.hook_backlog: Callable[[], int] = lambda: 0
        self.is_leader: Callable[[], bool] = lambda: False
        self.queue_figures: dict[str, tuple[int, float]] = {}
        self.dead_letter_figures: dict[str, int] = {}
        self.keys_waiting: dict[str, int] = {}
        self.waiting_parents_figures: dict[str, int] = {}
        if prometheus:
            self._build_prometheus()
        if otel:
            self._build_otel()

    @classmethod
    def disabled(cls) -> WorkerMetrics:
        return cls()

    @classmethod
    def for_worker(cls, metrics_port: int | None, max_kinds: int = MAX_KINDS) -> WorkerMetrics:
        """Prometheus when a port is given (MetricsUnavailable without prometheus-client),
        OpenTelemetry when its SDK is configured; else the null object."""
        if metrics_port is not None and not prometheus_available():
            raise MetricsUnavailable()
        return cls(
            prometheus=metrics_port is not None,
            otel=tracing.meter_configured(),
            max_kinds=max_kinds,
        )

    # -- recording (the hot path: a dict lookup and an increment) ------------------------
    def event(self, event: Event) -> None:
        """Count one committed lifecycle event."""
        if not self.enabled:
            return
        if isinstance(event, Rescued):
            self._count("awa_maintenance_rescues", (event.reason,))
            return
        if isinstance(event, Exhausted) and event.reason:
            # A rescue of a last attempt fires only Exhausted (decision 035): it is both.
            self._count("awa_maintenance_rescues", (event.reason,))
        outcome = _OUTCOMES.get(type(event))
        if outcome is not None:
            self._count(f"awa_job_{outcome}", (self.kind_label(event.job.kind), event.job.queue))

    def attempt(self, kind: str, queue: str, seconds: float, wait_seconds: float | None) -> None:
        """One attempt ran for `seconds`; it waited `wait_seconds` from created to claimed."""
        if not self.enabled:
            return
        kind = self.kind_label(kind)
        self._observe("awa_job_duration_seconds", (kind, queue), seconds)
        if wait_seconds is not None:
            self._observe("awa_job_wait_duration_seconds", (kind, queue), max(wait_seconds, 0))

    def claimed(self, queue: str, count: int, seconds: float) -> None:
        if not self.enabled:
            return
        self._observe("awa_dispatch_claim_duration_seconds", (queue,), seconds)
        self._observe("awa_dispatch_claim_batch_size", (queue,), count)
        if count:
            self._count("awa_job_claimed", (queue,), count)

    def flushed(self, count: int, seconds: float) -> None:
        if not self.enabled:
            return
        self._observe("awa_completion_flush_duration_seconds", (), seconds)
        self._observe("awa_completion_flush_batch_size", (), count)

    def hook_ran(self, kind: str, seconds: float) -> None:
        if not self.enabled:
            return
        self._observe("awa_hook_duration_seconds", (self.kind_label(kind),), seconds)

    def kind_label(self, kind: str) -> str:
        """`kind` as a label value: itself for the first `max_kinds` kinds this worker has
        a handler for, OTHER_KIND for the rest. Decided once per kind (a dict lookup after);
        the memory of decisions is bounded too."""
        label = self._kind_labels.get(kind)
        if label is None:
            label = OTHER_KIND
            if self._kinds_named < self.max_kinds and _handled(kind):
                label, self._kinds_named = kind, self._kinds_named + 1
            if len(self._kind_labels) < KIND_MEMORY:
                self._kind_labels[kind] = label
        return label

    def set_queue_figures(self, figures: dict[str, tuple[int, float]]) -> None:
        """The leader's latest {queue: (depth, lag seconds)} (worker/maintenance/depth.py)."""
        self.queue_figures = figures

    def set_dead_letter_figures(self, figures: dict[str, int]) -> None:
        """The leader's latest {queue: dead letters} (worker/maintenance/depth.py)."""
        self.dead_letter_figures = figures

    def set_keys_waiting(self, figures: dict[str, int]) -> None:
        """The leader's latest {queue: jobs waiting for a concurrency-key slot}."""
        self.keys_waiting = figures

    def set_waiting_parents_figures(self, figures: dict[str, int]) -> None:
        """The leader's latest {queue: jobs in `waiting_parents`} (maintenance/depth.py)."""
        self.waiting_parents_figures = figures

    # -- sinks -----------------------------------------------------------------------------
    def _count(self, name: str, labels: tuple[str, ...], amount: int = 1) -> None:
        if self.registry is not None:
            key = (name, labels)
            self._counts[key] = self._counts.get(key, 0) + amount
        if self._otel:
            self._otel[name].add(amount, self._attributes(name, labels))

    def _observe(self, name: str, labels: tuple[str, ...], value: float) -> None:
        if self.registry is not None:
            key = (name, labels)
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Histogram(INSTRUMENTS[name][3])
            series.observe(value)
        if self._otel:
            self._otel[name].record(value, self._attributes(name, labels))

    def _attributes(self, name: str, labels: tuple[str, ...]) -> dict[str, str]:
        key = (name, labels)
        found = self._otel_attributes.get(key)
        if found is None:
            found = self._otel_attributes[key] = _attributes(name, labels)
        return found

    def _build_prometheus(self) -> None:
        import prometheus_client as prom

        self.registry = prom.CollectorRegistry(auto_describe=True)
        for name, (_kind, labels, _text, buckets) in INSTRUMENTS.items():
            if not labels and buckets:  # label-less series are exposed from the start
                self._series[(name, ())] = _Histogram(buckets)
        self.registry.register(_RecordedCollector(self))
        self.registry.register(_LiveCollector(self))

    def _build_otel(self) -> None:
        meter = tracing.meter()
        for name, (kind, _labels, text, _buckets) in INSTRUMENTS.items():
            otel_name, unit = _otel_name(name)
            if kind == "counter":
                self._otel[name.removesuffix("_total")] = meter.create_counter(
                    otel_name, unit=unit, description=text
                )
            else:
                self._otel[name] = meter.create_histogram(otel_name, unit=unit, description=text)

    def render(self) -> bytes:
        """The Prometheus text exposition of every instrument."""
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))


class _Histogram:
    """One histogram series: a count per bucket (the last one is +Inf) and the sum.
    Written by the event loop's thread only; a scrape reads a copy."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # first bound >= value
        self.sum += value


KQ = ("kind", "queue")
# name → (type, labels, help, buckets). Names are Awa's with dots as underscores; a
# counter's `_total` suffix is prometheus-client's own.
INSTRUMENTS: dict[str, tuple[str, tuple[str, ...], str, tuple[float, ...]]] = {
    "awa_job_completed_total": ("counter", KQ, "Jobs completed (committed).", ()),
    "awa_job_failed_total": ("counter", KQ, "Jobs failed for good (exhausted or terminal).", ()),
    "awa_job_retried_total": ("counter", KQ, "Attempts that ended in a retry.", ()),
    "awa_job_cancelled_total": ("counter", KQ, "Jobs cancelled by their handler.", ()),
    "awa_job_claimed_total": ("counter", ("queue",), "Jobs claimed by this worker.", ()),
    "awa_maintenance_rescues_total": (
        "counter",
        ("reason",),
        "Attempts and parked jobs rescued by the leader.",
        (),
    ),
    "awa_job_duration_seconds": ("histogram", KQ, "Handler run time per attempt.", JOB_BUCKETS),
    "awa_job_wait_duration_seconds": (
        "histogram",
        KQ,
        "Time from a job's creation to the claim of this attempt.",
        JOB_BUCKETS,
    ),
    "awa_dispatch_claim_duration_seconds": (
        "histogram",
        ("queue",),
        "Duration of one claim statement.",
        STEP_BUCKETS,
    ),
    "awa_dispatch_claim_batch_size": (
        "histogram",
        ("queue",),
        "Jobs returned by one claim statement.",
        SIZE_BUCKETS,
    ),
    "awa_completion_flush_duration_seconds": (
        "histogram",
        (),
        "Duration of one batched completion flush.",
        STEP_BUCKETS,
    ),
    "awa_completion_flush_batch_size": (
        "histogram",
        (),
        "Completions written by one flush.",
        SIZE_BUCKETS,
    ),
    "awa_hook_duration_seconds": (
        "histogram",
        ("kind",),
        "Delivery of one lifecycle event to its hooks.",
        JOB_BUCKETS,
    ),
}
# Gauges read at scrape time by _LiveCollector: awa_job_in_flight{queue},
# awa_hook_backlog, awa_worker_leader, and on the leader awa_queue_depth{queue},
# awa_queue_lag_seconds{queue}, awa_dead_letter_depth{queue}, awa_keys_waiting{queue} and
# awa_queue_waiting_parents{queue}.


class _RecordedCollector:
    """The counters and histograms recorded since start, as metric families."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        # dict.copy() is atomic under the GIL: the loop may add a series meanwhile.
        counts, series = self.metrics._counts.copy(), self.metrics._series.copy()
        for name, (kind, labels, text, bounds) in INSTRUMENTS.items():
            if kind == "counter":
                base = name.removesuffix("_total")
                counter = CounterMetricFamily(base, text, labels=list(labels))
                for (owner, values), amount in sorted(counts.items()):
                    if owner == base:
                        counter.add_metric(list(values), amount)
                yield counter
                continue
            histogram = HistogramMetricFamily(name, text, labels=list(labels))
            les = [*map(floatToGoString, bounds), "+Inf"]
            for (owner, values), recorded in sorted(series.items(), key=lambda item: item[0]):
                if owner != name:
                    continue
                per_bucket, total = list(recorded.counts), recorded.sum
                cumulative = list(itertools.accumulate(per_bucket))
                histogram.add_metric(list(values), list(zip(les, cumulative, strict=True)), total)
            yield histogram


class _LiveCollector:
    """Gauges computed when scraped, from the runtime's own counters (no per-job work)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        m = self.metrics
        in_flight = GaugeMetricFamily(
            "awa_job_in_flight", "Attempts running in this worker.", labels=["queue"]
        )
        for queue, running in sorted(m.in_flight().items()):
            in_flight.add_metric([queue], running)
        yield in_flight
        yield GaugeMetricFamily(
            "awa_hook_backlog", "Lifecycle events waiting for their hooks.", m.hook_backlog()
        )
        leading = m.is_leader()
        yield GaugeMetricFamily(
            "awa_worker_leader", "1 while this worker is the maintenance leader.", int(leading)
        )
        if leading:
            yield from _queue_gauges(m.queue_figures)
            yield _per_queue_gauge("dead_letters", m.dead_letter_figures)
            yield _per_queue_gauge("keys_waiting", m.keys_waiting)
            yield _per_queue_gauge("waiting_parents", m.waiting_parents_figures)


def _queue_gauges(figures: dict[str, tuple[int, float]]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    depth = GaugeMetricFamily(
        "awa_queue_depth", "Available jobs per queue (published by the leader).", labels=["queue"]
    )
    lag = GaugeMetricFamily(
        "awa_queue_lag_seconds",
        "Age of the oldest available job per queue (published by the leader).",
        labels=["queue"],
    )
    for queue, (jobs, seconds) in sorted(figures.items()):
        depth.add_metric([queue], jobs)
        lag.add_metric([queue], seconds)
    yield depth
    yield lag


# The leader's per-queue gauges beside depth and lag: name, help.
_PER_QUEUE_GAUGES = {
    "dead_letters": ("awa_dead_letter_depth", "Jobs in the dead letters per queue"),
    "keys_waiting": (
        "awa_keys_waiting",
        "Jobs waiting for a concurrency-key slot per queue",
    ),
    "waiting_parents": (
        "awa_queue_waiting_parents",
        "Jobs waiting for their parents per queue",
    ),
}


def _per_queue_gauge(which: str, figures: dict[str, int]) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    name, help_text = _PER_QUEUE_GAUGES[which]
    gauge = GaugeMetricFamily(name, f"{help_text} (published by the leader).", labels=["queue"])
    for queue, jobs in sorted(figures.items()):
        gauge.add_metric([queue], jobs)
    return gauge


_LABEL_KEYS = {"kind": "awa.job.kind", "queue": "awa.job.queue", "reason": "awa.rescue.kind"}


def _attributes(name: str, labels: tuple[str, ...]) -> dict[str, str]:
    keys = INSTRUMENTS.get(name, INSTRUMENTS.get(f"{name}_total", ("", (), "", ())))[1]
    return {_LABEL_KEYS.get(k, f"awa.{k}"): v for k, v in zip(keys, labels, strict=True)}


def _otel_name(name: str) -> tuple[str, str]:
    """`awa_job_duration_seconds` → ("awa.job.duration", "s"), counters unit "1"."""
    base = name.removesuffix("_total")
    unit = "s" if base.endswith("_seconds") else "1"
    base = base.removesuffix("_seconds")
    for prefix in ("awa_job_", "awa_queue_", "awa_dispatch_", "awa_completion_", "awa_hook_"):
        if base.startswith(prefix):
            return prefix.replace("_", ".") + base[len(prefix) :], unit
    return base.replace("_", ".", 2), unit
