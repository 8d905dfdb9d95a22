"""Flow control with real `manage.py awa_worker` processes (issue 10, decision 017): a
global rate limit shared by two processes, weighted sharing of one worker's slots, and a
runtime override picked up by a running worker.

Rates and shares are computed from what the database committed (attempted_at, the lease
rows), never from the test's own clock.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db.models import Count

import awa_django
from awa_django.client import Client
from awa_django.storage.models import ActiveLease, Job
from testproject.testjobs.jobs import AccNoop, AccSleep
from testproject.testjobs.models import Execution
from tests.waiting import wait_until

from .conftest import WorkerProcess

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

StartWorker = Callable[..., WorkerProcess]
# A slot is freed when the handler returns; its lease row goes when the batched completion
# commits, later on a loaded machine. So lease counts show the split between the queues,
# not the exact total: that max_workers is never exceeded is proven on the arithmetic
# itself (tests/unit/test_fair_share.py).


def flow_env(queues: dict[str, object], worker: dict[str, int] | None = None) -> dict[str, str]:
    env = {"AWA_TEST_QUEUES": json.dumps(queues), "AWA_OVERRIDE_REFRESH_INTERVAL": "0.5"}
    if worker:
        env["AWA_TEST_WORKER"] = json.dumps(worker)
    return env


def leases_by_queue() -> dict[str, int]:
    rows = ActiveLease.objects.values("queue").annotate(n=Count("*")).order_by()
    return {row["queue"]: row["n"] for row in rows}


def has_started(worker: WorkerProcess) -> bool:
    return "started:" in worker.output()


def started_line(worker: WorkerProcess) -> str:
    return next(line for line in worker.output().splitlines() if "started:" in line)


def test_a_global_rate_limit_holds_across_two_worker_processes(start_worker: StartWorker) -> None:
    """20 jobs/s (burst 20) shared by two processes that could each run far faster: over
    the 30 s after the first second (the burst) the committed claims run at 20/s within
    10 %, and the whole run never exceeds rate x its span + burst. A burst of a second's
    tokens keeps a loaded machine's scheduling stalls from wasting refills."""
    rate, burst, window = 20, 20, 30.0
    env = flow_env({"flow-rate": {"concurrency": 10, "rate_limit": [rate, burst]}})
    workers = [start_worker(env=env), start_worker(env=env)]
    wait_until(lambda: all(has_started(w) for w in workers), what="workers start")
    assert "flow-rate: concurrency 10, rate 20/s burst 20 (global)" in started_line(workers[0])

    awa_django.enqueue_many(
        [AccNoop(i) for i in range(int(rate * (window + 6)))], queue="flow-rate"
    )
    total = Job.objects.filter(queue="flow-rate").count()
    wait_until(
        lambda: Job.objects.filter(queue="flow-rate", state="completed").count() == total,
        timeout=window + 60,
        what="every job completed",
    )

    claimed = Job.objects.filter(queue="flow-rate").values_list("attempted_at", flat=True)
    starts = sorted(t for t in claimed if t is not None)
    first = starts[0]
    begin, end = first + timedelta(seconds=1), first + timedelta(seconds=1 + window)
    measured = [t for t in starts if begin <= t < end]
    achieved = len(measured) / window
    assert abs(achieved - rate) <= rate * 0.10, f"{achieved:.2f} jobs/s"
    span = (starts[-1] - first).total_seconds()
    assert len(starts) <= rate * span + burst + 1, (len(starts), span)
    pids = Execution.objects.values_list("pid", flat=True).distinct()
    assert len(set(pids)) == 2  # both processes claimed: the limit was shared, not split


def test_weights_share_a_workers_slots_and_an_idle_queue_lends_its_share(
    start_worker: StartWorker,
) -> None:
    """max_workers 8, weights 3:1, both queues saturated with 0.4 s jobs: the live leases
    split about 6:2; once the light queue runs dry the heavy one takes all 8 slots."""
    env = flow_env({"flow-a": {"weight": 3}, "flow-b": {"weight": 1}}, {"max_workers": 8})
    worker = start_worker(env=env)
    wait_until(lambda: "started:" in worker.output(), what="worker start")
    assert "max_workers 8 shared by weight (flow-a min 0 weight 3, flow-b min 0 weight 1)" in (
        started_line(worker)
    )
    awa_django.enqueue_many([AccSleep(0.4) for _ in range(40)], queue="flow-b")
    awa_django.enqueue_many([AccSleep(0.4) for _ in range(200)], queue="flow-a")

    samples: list[dict[str, int]] = []

    def saturated_sample() -> bool:
        both_waiting = all(
            Job.objects.filter(queue=q, state="available").exists() for q in ("flow-a", "flow-b")
        )
        if both_waiting:
            sample = leases_by_queue()
            if len(samples) < 60 and sample.get("flow-a") and sample.get("flow-b"):
                samples.append(sample)
        return not both_waiting

    wait_until(saturated_sample, timeout=60, what="the light queue to run dry")
    assert len(samples) >= 10
    ratio = statistics.mean(s["flow-a"] for s in samples) / statistics.mean(
        s["flow-b"] for s in samples
    )
    assert 2.0 <= ratio <= 4.5, (ratio, samples)

    def heavy_queue_has_every_slot() -> bool:
        return leases_by_queue().get("flow-a", 0) >= 8

    wait_until(heavy_queue_has_every_slot, timeout=30, what="flow-a to borrow flow-b's share")


def test_a_running_worker_applies_a_runtime_override_within_seconds(
    start_worker: StartWorker,
) -> None:
    worker = start_worker("--queue", "flow-o=2", env=flow_env({"flow-o": 2}))
    wait_until(lambda: "started:" in worker.output(), what="worker start")
    awa_django.enqueue_many([AccSleep(60) for _ in range(8)], queue="flow-o")
    wait_until(lambda: leases_by_queue().get("flow-o") == 2, what="2 jobs running")

    Client().set_queue_limits("flow-o", concurrency=5, by="test")
    wait_until(lambda: leases_by_queue().get("flow-o") == 5, timeout=15, what="5 jobs running")
    wait_until(lambda: "'flow-o' limits now: concurrency 5" in worker.output(), what="log")


def test_minimums_beyond_max_workers_stop_the_worker_at_startup(
    start_worker: StartWorker,
) -> None:
    env = flow_env({"flow-a": {"min_workers": 3}, "flow-b": {"min_workers": 3}}, {"max_workers": 4})
    worker = start_worker(env=env)
    assert worker.wait(timeout=60) != 0
    assert "min_workers add up to 6, more than" in worker.output()
