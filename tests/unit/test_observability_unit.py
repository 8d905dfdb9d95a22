"""Pure parts of observability (decision 021): chart scaling and markup, the threshold
check behind `awa_status --check`, the Prometheus sink's counting, and the health
endpoint's routes. No database."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from awa_django.admin import charts
from awa_django.client import Breach, QueueStats, Thresholds, breaches
from awa_django.events import Exhausted, Rescued
from awa_django.exceptions import InvalidThreshold, MetricsUnavailable
from awa_django.worker import health
from awa_django.worker import metrics as metrics_module
from awa_django.worker.health import HealthServer
from awa_django.worker.metrics import WorkerMetrics, _otel_name
from tests.unit.test_hooks_unit import job_row


@given(st.floats(min_value=1e-6, max_value=1e12, allow_nan=False))
def test_nice_ceiling_is_a_round_number_at_or_just_above_the_value(value: float) -> None:
    top = charts.nice_ceiling(value)
    assert top >= value * 0.9999
    assert top <= value * 2.5 + 1e-9  # never more than one step too high
    mantissa = top / 10 ** math.floor(math.log10(top) + 1e-12)
    assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5, 10))


def test_nice_ceiling_of_nothing_is_one() -> None:
    assert charts.nice_ceiling(0) == 1.0 and charts.nice_ceiling(-3) == 1.0


def test_a_chart_draws_one_escaped_polyline_per_series_across_the_width() -> None:
    start = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    series = [
        charts.Series("a<b>", [0, 5, None, 10], "#2563eb"),
        charts.Series("c", [1, 1, 1, 1], "#dc2626"),
    ]
    svg = charts.line_chart("chart-1", "Completed", "", series, start)
    assert svg.count("<polyline") == 2
    assert 'data-series="a&lt;b&gt;"' in svg and "a<b>" not in svg
    assert "12:00" in svg and "12:03" in svg  # the first and last minute under the axis
    first = svg.split('points="')[1].split('"')[0].split()
    assert len(first) == 4 and first[0].startswith(f"{charts.PAD_LEFT}.0,")
    # 10 is the top (nice_ceiling(10) == 10): drawn at the top padding.
    assert first[3].endswith(f",{charts.PAD_TOP}.0")


def test_colours_are_stable_per_queue_name() -> None:
    assert charts.colours(["b", "a"]) == {"a": charts.PALETTE[0], "b": charts.PALETTE[1]}


def stats(queue: str, lag: float | None) -> QueueStats:
    return QueueStats(queue=queue, lag_seconds=lag)


def test_breaches_name_each_queue_over_each_threshold() -> None:
    found = breaches(
        [stats("a", 120.0), stats("b", 5.0), stats("c", None)],
        {"a": (9, 1), "b": (1, 3), "d": (0, 0)},
        Thresholds(max_lag_seconds=60, max_failure_rate=0.2),
    )
    assert found == [Breach("a", "lag", 120.0, 60), Breach("b", "failure_rate", 0.75, 0.2)]
    assert [str(b) for b in found] == ["a: lag 120.0s > 60s", "b: failure rate 75.0% > 20.0%"]


def test_a_value_equal_to_its_threshold_is_no_breach_and_few_jobs_are_not_judged() -> None:
    limits = Thresholds(max_lag_seconds=60, max_failure_rate=0.5, min_jobs=3)
    assert breaches([stats("a", 60.0)], {"a": (1, 1)}, limits) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_lag_seconds": -1.0},
        {"max_lag_seconds": math.inf},
        {"max_failure_rate": 1.01},
        {"max_failure_rate": math.nan},
        {"min_jobs": 0},
    ],
)
def test_thresholds_out_of_range_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidThreshold):
        Thresholds(**kwargs)  # type: ignore[arg-type]


def test_disabled_metrics_record_nothing_and_render_no_registry() -> None:
    sink = WorkerMetrics.disabled()
    sink.claimed("q", 3, 0.01)
    sink.attempt("k", "q", 1.0, 1.0)
    assert not sink.enabled and sink.registry is None


def test_prometheus_sink_counts_per_label_and_exposes_live_gauges() -> None:
    sink = WorkerMetrics(prometheus=True)
    sink.claimed("q", 3, 0.01)
    sink.claimed("q", 0, 0.01)
    sink.attempt("acc_noop", "q", 0.3, None)
    sink.in_flight = lambda: {"q": 2}
    sink.set_queue_figures({"q": (7, 1.5)})
    sink.set_dead_letter_figures({"q": 4})
    text = sink.render().decode()
    assert 'awa_job_claimed_total{queue="q"} 3.0' in text
    assert 'awa_dispatch_claim_batch_size_count{queue="q"} 2.0' in text
    assert 'awa_job_duration_seconds_count{kind="acc_noop",queue="q"} 1.0' in text
    assert 'awa_job_wait_duration_seconds_count{kind="acc_noop",queue="q"}' not in text
    assert 'awa_job_in_flight{queue="q"} 2.0' in text
    assert "awa_queue_depth" not in text  # only the leader publishes depth and lag
    assert "awa_dead_letter_depth" not in text
    sink.is_leader = lambda: True
    text = sink.render().decode()
    assert 'awa_queue_lag_seconds{queue="q"} 1.5' in text
    assert 'awa_dead_letter_depth{queue="q"} 4.0' in text


def kind_values(sink: WorkerMetrics) -> set[str]:
    families = text_string_to_metric_families(sink.render().decode())
    return {s.labels["kind"] for f in families for s in f.samples if "kind" in s.labels}


def test_kinds_this_worker_does_not_have_fold_into_other() -> None:
    sink = WorkerMetrics(prometheus=True)
    for n in range(305):
        sink.attempt(f"unknown_kind_{n}", "q", 0.1, 0.1)
        sink.hook_ran(f"unknown_kind_{n}", 0.01)
    sink.attempt("acc_noop", "q", 0.1, 0.1)
    assert kind_values(sink) == {"acc_noop", "other"}
    text = sink.render().decode()
    assert 'awa_job_duration_seconds_count{kind="other",queue="q"} 305.0' in text
    assert len(text) < 20_000


def test_kinds_past_the_cap_fold_into_other() -> None:
    sink = WorkerMetrics(prometheus=True, max_kinds=2)
    for kind in ("acc_noop", "acc_sleep", "acc_block", "acc_noop"):
        sink.attempt(kind, "q", 0.1, None)
    assert kind_values(sink) == {"acc_noop", "acc_sleep", "other"}
    text = sink.render().decode()
    assert 'awa_job_duration_seconds_count{kind="acc_noop",queue="q"} 2.0' in text
    assert 'awa_job_duration_seconds_count{kind="other",queue="q"} 1.0' in text


def test_the_kind_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "KIND_MEMORY", 3)
    sink = WorkerMetrics(prometheus=True)
    for n in range(10):
        assert sink.kind_label(f"unknown_kind_{n}") == "other"
    assert len(sink._kind_labels) == 3


def test_a_rescue_counts_once_whether_it_retries_or_ends_the_job() -> None:
    """Decision 035: a rescue of the last attempt fires only Exhausted (with its reason);
    it counts as a rescue and as a failure, a retrying rescue (Rescued) as a rescue."""
    sink = WorkerMetrics(prometheus=True)
    job = job_row(kind="acc_noop", queue="q", state="failed")  # a kind with a handler
    sink.event(Rescued(job=job, reason="stale_heartbeat"))
    sink.event(Exhausted(job=job, error="e", attempt=3, reason="stale_heartbeat"))
    sink.event(Exhausted(job=job, error="e", attempt=3))  # a handler's: no rescue
    text = sink.render().decode()
    assert 'awa_maintenance_rescues_total{reason="stale_heartbeat"} 2.0' in text
    assert 'awa_job_failed_total{kind="acc_noop",queue="q"} 2.0' in text


def test_histograms_count_a_value_on_a_bound_in_that_bucket_and_cumulate() -> None:
    sink = WorkerMetrics(prometheus=True)
    for size in (1, 2, 3, 600):  # bounds 1, 2, 5, ...; 600 is past the last (512)
        sink.claimed("q", size, 0.01)
    families = {f.name: f for f in text_string_to_metric_families(sink.render().decode())}
    buckets = {
        s.labels["le"]: s.value
        for s in families["awa_dispatch_claim_batch_size"].samples
        if s.name.endswith("_bucket")
    }
    assert (buckets["1.0"], buckets["2.0"], buckets["5.0"], buckets["512.0"]) == (1, 2, 3, 3)
    assert buckets["+Inf"] == 4
    totals = {s.name: s.value for s in families["awa_dispatch_claim_batch_size"].samples}
    assert totals["awa_dispatch_claim_batch_size_sum"] == 606
    assert totals["awa_dispatch_claim_batch_size_count"] == 4
    # A label-less series is exposed before its first observation.
    flushes = families["awa_completion_flush_duration_seconds"].samples
    assert any(s.name.endswith("_count") and s.value == 0 for s in flushes)


def test_a_metrics_port_without_prometheus_client_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setattr(metrics_module, "prometheus_available", lambda: False)
    with pytest.raises(MetricsUnavailable, match=r"pip install 'awa-django\[metrics\]'"):
        WorkerMetrics.for_worker(9464)
    assert not WorkerMetrics.for_worker(None).registry  # no port: no Prometheus needed


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("awa_job_completed", ("awa.job.completed", "1")),
        ("awa_job_wait_duration_seconds", ("awa.job.wait_duration", "s")),
        ("awa_dispatch_claim_duration_seconds", ("awa.dispatch.claim_duration", "s")),
        ("awa_completion_flush_batch_size", ("awa.completion.flush_batch_size", "1")),
        ("awa_maintenance_rescues", ("awa.maintenance.rescues", "1")),
    ],
)
def test_opentelemetry_names_are_awas(name: str, expected: tuple[str, str]) -> None:
    assert _otel_name(name) == expected


def test_the_health_routes_answer_by_path_and_readiness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "READINESS_MAX_AGE_SECONDS", 0.0)
    reasons: list[str | None] = [None]
    server = HealthServer("127.0.0.1", 0, WorkerMetrics(prometheus=True), lambda: reasons[0])

    def respond(path: str) -> tuple[int, str, bytes]:
        return asyncio.run(server.respond(path))

    try:
        assert respond("/healthz") == (200, "application/json", b'{"status": "ok"}')
        assert respond("/readyz?verbose=1")[0] == 200
        reasons[0] = "draining: the worker is shutting down"
        status, _, body = respond("/readyz")
        assert status == 503 and b"draining" in body
        assert respond("/metrics")[0] == 200
        assert respond("/other")[0] == 404
    finally:
        server.stop()


def test_concurrent_askers_share_one_computation_and_a_fresh_value_is_reused() -> None:
    computed: list[int] = []

    def compute() -> int:
        time.sleep(0.05)
        computed.append(1)
        return len(computed)

    shared = health.Shared(compute, 60.0, "test-shared")

    async def ask_many() -> list[int]:
        return list(await asyncio.gather(*(shared.get() for _ in range(50))))

    try:
        assert asyncio.run(ask_many()) == [1] * 50
        assert asyncio.run(shared.get()) == 1  # younger than max_age: not computed again
        assert computed == [1]
    finally:
        shared.close()
