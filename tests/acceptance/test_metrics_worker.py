"""A real worker's metrics and health endpoint (`awa_worker --metrics-port`): its counters
equal the committed outcomes of a known workload, `/readyz` follows the database, and the
worker runs without prometheus-client / OpenTelemetry unless metrics are asked for."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import awa_django
from awa_django.storage.models import Job
from testproject.testjobs.jobs import AccNoop, AccOutcome
from tests.waiting import wait_until

from .conftest import WorkerProcess
from .test_hostile_worker import db_proxy, proxied_database_url
from .test_worker_process import listening

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

__all__ = ["db_proxy"]  # the fixture, imported for this module's tests

WORKLOAD = {"complete": 20, "fail": 5, "retry": 4, "cancel": 3}
TERMINAL = ("completed", "failed", "cancelled")


def endpoint(worker: WorkerProcess) -> str:
    """The base URL the worker logged ("metrics and health on http://0.0.0.0:PORT/")."""
    pattern = re.compile(r"metrics and health on http://[^:]+:(\d+)/")
    found = wait_until(lambda: pattern.search(worker.output()), what="the metrics endpoint")
    return f"http://127.0.0.1:{found.group(1)}"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics by (name, sorted labels)."""
    status, text = get(f"{base}/metrics")
    assert status == 200, text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def counter(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return values.get((name, (("kind", "acc_outcome"), ("queue", "acc"))), 0.0)


def test_counters_equal_the_committed_outcomes_of_a_known_workload(start_worker):
    worker = start_worker("--queue", "acc=4", "--metrics-port", "0")
    base = endpoint(worker)
    awa_django.enqueue_many(
        [AccOutcome(outcome, n) for outcome, count in WORKLOAD.items() for n in range(count)]
    )
    total = sum(WORKLOAD.values())
    wait_until(
        lambda: Job.objects.filter(kind="acc_outcome", state__in=TERMINAL).count() == total,
        timeout=60,
        what="the workload to finish",
    )
    jobs = Job.objects.filter(kind="acc_outcome")
    committed = {state: jobs.filter(state=state).count() for state in TERMINAL}
    retried = sum(job.attempt - 1 for job in jobs)  # each attempt before the last retried
    assert committed == {"completed": 24, "failed": 5, "cancelled": 3}  # the workload's own
    # Events are counted right after their commit: wait for the last one, then compare all.
    wait_until(
        lambda: counter(samples(base), "awa_job_completed_total") == committed["completed"],
        what="the completed counter",
    )
    values = samples(base)
    assert counter(values, "awa_job_completed_total") == committed["completed"]
    assert counter(values, "awa_job_failed_total") == committed["failed"]
    assert counter(values, "awa_job_cancelled_total") == committed["cancelled"]
    assert counter(values, "awa_job_retried_total") == retried == WORKLOAD["retry"]
    attempts = total + WORKLOAD["retry"]
    assert counter(values, "awa_job_duration_seconds_count") == attempts
    assert counter(values, "awa_job_wait_duration_seconds_count") == attempts
    assert values[("awa_job_claimed_total", (("queue", "acc"),))] == attempts
    assert values[("awa_worker_leader", ())] == 1.0
    assert worker.stop() == 0


def test_readyz_follows_the_database_and_healthz_the_process(db_proxy, start_worker):
    worker = start_worker(
        "--queue",
        "acc=2",
        "--metrics-port",
        "0",
        env={"DATABASE_URL": proxied_database_url(db_proxy.port)},
    )
    base = endpoint(worker)
    wait_until(lambda: get(f"{base}/readyz")[0] == 200, what="ready")
    db_proxy.blackhole()  # the database stops answering, nothing is closed
    unready: tuple[int, str] = wait_until(
        lambda: answer if (answer := get(f"{base}/readyz"))[0] == 503 else None,
        timeout=5,
        what="/readyz to turn 503 within 5 s of the database going away",
    )
    body = unready[1]
    assert json.loads(body)["reason"].startswith("database unreachable")
    assert get(f"{base}/healthz") == (200, '{"status": "ok"}')  # the process is alive
    db_proxy.restore()
    wait_until(lambda: get(f"{base}/readyz")[0] == 200, timeout=30, what="ready again")
    assert get(f"{base}/nothing-here")[0] == 404
    worker.kill()


@pytest.fixture
def without_optional_packages(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A worker environment where prometheus-client and OpenTelemetry cannot be imported."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\n"
        "for name in ('prometheus_client', 'opentelemetry'):\n"
        "    sys.modules[name] = None  # import fails, importlib.util.find_spec says None\n"
    )
    yield {"PYTHONPATH": str(shim)}


def test_the_worker_runs_without_the_optional_packages_unless_metrics_are_asked_for(
    start_worker, without_optional_packages
):
    worker = start_worker("--queue", "acc=2", env=without_optional_packages)
    wait_until(listening, what="worker LISTEN connection")
    job = awa_django.enqueue(AccNoop(1))
    wait_until(lambda: Job.objects.get(id=job.id).state == "completed", what="the job")
    assert worker.stop() == 0

    refused = start_worker("--metrics-port", "0", env=without_optional_packages)
    assert refused.wait(timeout=60) != 0
    assert "pip install 'awa-django[metrics]'" in refused.output()
    assert "Traceback" not in refused.output()
