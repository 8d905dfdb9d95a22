"""The measured scenarios. Each resets the bench database, runs once and returns its
figures as a dict (one JSON line). Workers are subprocesses; enqueues run here, on
Django's connection in autocommit, as an application would."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

import awa_django

from . import database as db
from . import deep, procfs
from .benchapp.jobs import (
    BenchAsync,
    BenchAtomic,
    BenchAtomicWrite,
    BenchFail,
    BenchKeyed,
    BenchSync,
    BenchSyncWrite,
    PickupAsync,
    PickupSync,
)
from .bulk import bulk_control, bulk_retry, bulk_retry_paced, bulk_retry_unpaced
from .floor import run_enqueue_floor, run_floor, run_statement_floor
from .herd import herd
from .soak import soak
from .stats import latency_ms
from .worker import WorkerProcess
from .workflows import chains, fan_in

POLL_INTERVAL = 0.02
WARMUP_JOBS = 5


@dataclass(frozen=True)
class Options:
    jobs: int = 20_000  # drain, enqueue_many and floor
    enqueue_jobs: int = 2_000  # enqueue one by one
    pickup_jobs: int = 200
    pickup_interval: float = 0.02
    bulk_jobs: int = 1_000_000  # bulk_retry: failed jobs retried in one operation
    bulk_rate: float = 2_000.0  # bulk_retry_paced: its max_per_second
    deep_rows: int = 1_000_000  # drain_deep, drain_pruning: ballast rows per state
    promote_rows: int = 10_000_000  # promote_deep: scheduled rows a year ahead
    promote_seconds: float = 60.0  # promote_deep: how long 1,000 jobs/s fall due
    soak_minutes: int = 30
    soak_rate: float = 1000.0  # jobs/s offered
    profile_dir: Path | None = None  # py-spy the drain workers (slows them: not comparable)
    concurrency: int = 10  # drain scenarios: the slots of each worker process
    flows: int = 10_000  # fan_in: parents of the one child; chains: chains of three


Scenario = Callable[[Options], dict[str, Any]]


# -- (b) enqueue --------------------------------------------------------------------------
def enqueue_one(options: Options, **extra: Any) -> dict[str, Any]:
    db.reset()
    for i in range(20):  # connection set-up and statement warm-up, not measured
        awa_django.enqueue(BenchAsync(n=-i - 1), **extra)
    took: list[float] = []
    began = time.perf_counter()
    for i in range(options.enqueue_jobs):
        t = time.perf_counter()
        awa_django.enqueue(BenchAsync(n=i), **extra)
        took.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - began
    return {
        "jobs": options.enqueue_jobs,
        "jobs_per_s": round(options.enqueue_jobs / elapsed, 1),
        "elapsed_s": round(elapsed, 3),
        **latency_ms(took),
    }


def enqueue_unique(options: Options) -> dict[str, Any]:
    """enqueue_one with UniqueOpts (distinct args: every enqueue writes a row)."""
    return enqueue_one(options, unique=awa_django.UniqueOpts())


def enqueue_many_unique(options: Options) -> dict[str, Any]:
    """enqueue_many with UniqueOpts (distinct args: every row is written)."""
    return enqueue_many(options, unique=awa_django.UniqueOpts())


def enqueue_many(options: Options, **extra: Any) -> dict[str, Any]:
    db.reset()
    jobs = [BenchAsync(n=i) for i in range(options.jobs)]
    began = time.perf_counter()
    with transaction.atomic():
        ids = awa_django.enqueue_many(jobs, **extra)
    elapsed = time.perf_counter() - began
    if len(ids) != options.jobs:
        raise RuntimeError(f"enqueue_many returned {len(ids)} ids for {options.jobs} jobs")
    return {
        "jobs": options.jobs,
        "jobs_per_s": round(options.jobs / elapsed, 1),
        "elapsed_s": round(elapsed, 3),
    }


# -- (d) floor ----------------------------------------------------------------------------
def floor(options: Options) -> dict[str, Any]:
    db.reset()
    return run_floor(options.jobs)


def floor_10(options: Options) -> dict[str, Any]:
    """The floor in batches of ten: what one connection can do at a worker's concurrency
    10, with none of the queue's work (leases, whole rows returned, guards, events)."""
    db.reset()
    return run_floor(options.jobs, batch=10)


def floor_statements(options: Options) -> dict[str, Any]:
    """The worker's claim and lean completion of a worker of concurrency
    `options.concurrency`, in a bare loop (bench/floor.py): the drain's ceiling with the
    queue's guarantees, without its Python."""
    db.reset()
    return {
        **run_statement_floor(options.jobs, options.concurrency),
        "concurrency": options.concurrency,
    }


def floor_pinned(options: Options) -> dict[str, Any]:
    db.reset()
    with db.pinned_horizon():
        return {**run_floor(options.jobs), "pinned_horizon": True}


def floor_enqueue(options: Options) -> dict[str, Any]:
    db.reset()
    return run_enqueue_floor(options.enqueue_jobs, options.jobs)


# -- (a) drain and (e) slow hook ----------------------------------------------------------
def drain(
    args_type: type,
    processes: int = 1,
    slow_hook: str = "",
    pin_horizon: bool = False,
    observed: bool = False,
    metrics: bool = False,
    ballast: str = "",
) -> Scenario:
    def scenario(options: Options) -> dict[str, Any]:
        profile_to = None
        if options.profile_dir is not None:
            handlers = "async" if args_type is BenchAsync else "sync"
            name = f"drain-{handlers}-p{processes}-{time.strftime('%H%M%S')}.txt"
            profile_to = options.profile_dir / name
        figures = _drain(
            options.jobs,
            args_type,
            processes,
            slow_hook,
            profile_to,
            observed=observed,
            metrics=metrics,
            pin_horizon=pin_horizon,
            ballast=BALLASTS[ballast](options.deep_rows) if ballast else None,
            concurrency=options.concurrency,
        )
        return {**figures, "pinned_horizon": pin_horizon, "observed": observed, "metrics": metrics}

    return scenario


def _drain(
    n: int,
    args_type: type,
    processes: int,
    slow_hook: str,
    profile_to: Path | None,
    extra_env: dict[str, str] | None = None,
    *,
    observed: bool = False,
    metrics: bool = False,
    pin_horizon: bool = False,
    ballast: Callable[[], dict[str, Any]] | None = None,
    concurrency: int = 10,
) -> dict[str, Any]:
    db.reset()
    deep_figures = ballast() if ballast is not None else {}
    with transaction.atomic():
        awa_django.enqueue_many([args_type(n=i) for i in range(n)])
    db.analyze()
    env = {"AWA_BENCH_SLOW_HOOK": slow_hook} if slow_hook else {}
    env.update(extra_env or {})
    # Observed: the Prometheus endpoint on, and OpenTelemetry's SDK tracing every attempt.
    # Metrics: the Prometheus endpoint alone.
    extra_args = ["--metrics-port", "0"] if observed or metrics else []
    if observed:
        env["AWA_BENCH_OTEL"] = "1"
    scans_before, reads_before = db.dispatch_index_reads()
    reclaim: dict[str, Any] = {}
    with ExitStack() as stack:
        pin = stack.enter_context(db.pinned_horizon()) if pin_horizon else None
        worker = stack.enter_context(
            WorkerProcess(
                processes=processes,
                concurrency=concurrency,
                extra_env=env,
                extra_args=extra_args,
                profile_to=profile_to,
            )
        )
        drained_at = db.wait_until(
            lambda: _drained(worker), max(120.0, n / 50), POLL_INTERVAL, f"{n} completions"
        )
        worker_cpu, backend_cpu = procfs.worker_cpu(worker.pid), procfs.backend_cpu()
        if pin is not None:
            reclaim = _reclaim_after_release(pin, n)
    if deep_figures:
        deep_figures["ballast_left_after_drain"] = deep.ballast_left()
    counts = db.state_counts()
    if counts != {"completed": n}:
        raise RuntimeError(f"after the drain the jobs are {counts}, expected {n} completed")
    if args_type in (BenchSyncWrite, BenchAtomicWrite) and (written := db.written_rows()) != n:
        raise RuntimeError(f"the handlers wrote {written} rows, expected {n}")
    first, last = db.completion_times()
    scans, reads = db.dispatch_index_reads()  # the worker's backends flushed them on exit
    return {
        "jobs": n,
        "processes": processes,
        "concurrency": concurrency,
        "handlers": "async" if args_type in (BenchAsync, BenchKeyed) else "sync",
        "job": args_type.__name__,
        "slow_hook": slow_hook or None,
        "jobs_per_s": round(n / (drained_at - worker.started_at), 1),
        "jobs_per_s_excl_startup": round(n / max(last - first, 1e-9), 1),
        "startup_s": round(first - worker.started_at, 3),
        "elapsed_s": round(drained_at - worker.started_at, 3),
        "worker_cpu_s": _rounded(worker_cpu),
        "backends_cpu_s": _rounded(backend_cpu),
        "dispatch_idx_scans": scans - scans_before,
        "dispatch_idx_entries_read": reads - reads_before,
        "slice_jobs_per_s": db.slice_rates(SLICE) if n >= 2 * SLICE else None,
        **reclaim,
        **deep_figures,
        "stop_s": None if worker.stop_seconds is None else round(worker.stop_seconds, 3),
        "profiled": profile_to is not None,
        "latency": "claim commit -> completion commit",
        **latency_ms(db.claim_to_completion_seconds()),
    }


# The rows a deep-table drain loads first (bench/deep.py), by name: --deep-rows -> loader.
BALLASTS: dict[str, Callable[[int], Callable[[], dict[str, Any]]]] = {
    "deep": lambda rows: lambda: deep.deep_ballast(rows),
    "prunable": lambda rows: lambda: deep.prunable_ballast(rows, prunable=True),
    "kept": lambda rows: lambda: deep.prunable_ballast(rows, prunable=False),
}
SLICE = 10_000  # completions per slice in `slice_jobs_per_s`
RECLAIM_TIMEOUT = 180.0


def _reclaim_after_release(pin: db.Pin, n: int) -> dict[str, Any]:
    """End the held snapshot with the worker still running, and time how long until the
    drain's dead rows are gone from awa_jobs_hot (by autovacuum, or by the worker's own
    reclaimer where autovacuum is off) without anyone running VACUUM by hand."""
    dead_before = db.dead_tuples()
    pin.release()
    released = time.time()
    try:
        done = db.wait_until(lambda: db.dead_tuples() < n // 10, RECLAIM_TIMEOUT, 1.0, "reclaim")
        reclaimed_s: float | None = round(done - released, 1)
    except TimeoutError:
        reclaimed_s = None
    return {
        "dead_rows_at_release": dead_before,
        "reclaimed_s": reclaimed_s,
        "dead_rows_after": db.dead_tuples(),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _drained(worker: WorkerProcess) -> bool:
    worker.check_alive()
    return not db.any_pending()


# -- failing for good, in place or into the dead letters ---------------------------------
def fail(dead_letter: bool) -> Scenario:
    def scenario(options: Options) -> dict[str, Any]:
        return _fail(options.jobs, dead_letter)

    return scenario


def _fail(n: int, dead_letter: bool) -> dict[str, Any]:
    """N jobs whose async handler raises TerminalError, drained by one worker: each attempt
    ends with the single guarded failure statement (an UPDATE to `failed`, or the
    DELETE ... INSERT into the dead letters)."""
    db.reset()
    with transaction.atomic():
        awa_django.enqueue_many([BenchFail(n=i) for i in range(n)])
    db.analyze()
    env = {"AWA_BENCH_DEAD_LETTER": "1"} if dead_letter else {}
    with WorkerProcess(extra_env=env) as worker:
        observed = db.wait_until(
            lambda: _drained(worker), max(120.0, n / 50), POLL_INTERVAL, f"{n} failures"
        )
    failed = db.dead_letter_count() if dead_letter else db.state_counts().get("failed", 0)
    if failed != n:
        raise RuntimeError(f"{failed} of {n} jobs failed as expected (dead_letter={dead_letter})")
    return {
        "jobs": n,
        "dead_letter": dead_letter,
        "jobs_per_s": round(n / (observed - worker.started_at), 1),
        "elapsed_s": round(observed - worker.started_at, 3),
    }


# -- rate-limited drain (docs/flow-control.md) --------------------------------------------
RATE_LIMIT = (100.0, 20)


def drain_rate_limited(options: Options) -> dict[str, Any]:
    """Two worker processes drain a queue with a global limit of 100 jobs/s (burst 20),
    far below what they could do: the achieved rate should sit just under the limit."""
    rate, burst = RATE_LIMIT
    n = min(options.jobs, 3_000)
    env = {"AWA_BENCH_RATE_LIMIT": f"{rate},{burst}"}
    figures = _drain(n, BenchAsync, 2, "", None, env)
    return {**figures, "rate_limit": rate, "burst": burst}


# -- (c) pickup latency -------------------------------------------------------------------
def pickup(args_type: type) -> Scenario:
    def scenario(options: Options) -> dict[str, Any]:
        return _pickup(args_type, options.pickup_jobs, options.pickup_interval)

    return scenario


def _pickup(args_type: type, count: int, interval: float) -> dict[str, Any]:
    db.reset()
    with WorkerProcess() as worker:
        startup = _warm_up(worker, args_type)
        time.sleep(0.5)  # let every dispatcher go back to waiting on LISTEN
        committed = _enqueue_paced(args_type, count, interval)
        ids = list(committed)
        db.wait_until(
            lambda: _all_completed(worker, ids), 60.0, POLL_INTERVAL, f"{count} pickup probes"
        )
    started = db.handler_start_times(ids)
    if len(started) != count:
        raise RuntimeError(f"{count - len(started)} probes have no handler start time (result)")
    return {
        "jobs": count,
        "handlers": "async" if args_type is PickupAsync else "sync",
        "interval_ms": round(interval * 1000, 1),
        "jobs_per_s": None,
        "startup_s": round(startup, 3),
        "latency": "enqueue commit -> handler start",
        **latency_ms([started[i] - committed[i] for i in ids]),
    }


def _warm_up(worker: WorkerProcess, args_type: type) -> float:
    """Run a few probes through the fresh worker; returns seconds until they completed."""
    ids = [awa_django.enqueue(args_type(n=-i)).id for i in range(1, WARMUP_JOBS + 1)]
    done = db.wait_until(lambda: _all_completed(worker, ids), 120.0, POLL_INTERVAL, "warm-up")
    return done - worker.started_at


def _all_completed(worker: WorkerProcess, ids: list[int]) -> bool:
    worker.check_alive()
    return db.completed_count(ids) == len(ids)


def _enqueue_paced(args_type: type, count: int, interval: float) -> dict[int, float]:
    """Enqueue `count` probes `interval` apart (autocommit); id -> time the commit returned."""
    committed: dict[int, float] = {}
    began = time.perf_counter()
    for i in range(count):
        delay = began + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        row = awa_django.enqueue(args_type(n=i))
        committed[row.id] = time.time()
    return committed


SCENARIOS: dict[str, Scenario] = {
    "enqueue_one": enqueue_one,
    "enqueue_unique": enqueue_unique,
    "enqueue_many": enqueue_many,
    "enqueue_many_unique": enqueue_many_unique,
    "floor": floor,
    "floor_10": floor_10,
    "floor_statements": floor_statements,
    "floor_enqueue": floor_enqueue,
    "drain_async": drain(BenchAsync),
    "slow_hook": drain(BenchAsync, slow_hook="async"),
    "slow_hook_sync": drain(BenchAsync, slow_hook="sync"),
    "noop_hook": drain(BenchAsync, slow_hook="noop"),
    "drain_sync": drain(BenchSync),
    # Async no-ops over 100 concurrency keys, max_in_flight 5 (docs/flow-control.md).
    "drain_keyed": drain(BenchKeyed),
    "drain_atomic": drain(BenchAtomic),
    "drain_sync_write": drain(BenchSyncWrite),
    "drain_atomic_write": drain(BenchAtomicWrite),
    "drain_async_p2": drain(BenchAsync, processes=2),
    "drain_sync_p2": drain(BenchSync, processes=2),
    "drain_async_p4": drain(BenchAsync, processes=4),
    "drain_async_pinned": drain(BenchAsync, pin_horizon=True),
    # Metrics and tracing on vs off, same handlers (docs/operations.md, decision 021).
    "drain_metrics": drain(BenchAsync, metrics=True),
    "drain_observed": drain(BenchAsync, observed=True),
    "drain_sync_observed": drain(BenchSync, observed=True),
    "floor_pinned": floor_pinned,
    "fail_in_place": fail(dead_letter=False),
    "fail_dead_letter": fail(dead_letter=True),
    "drain_rate_limited": drain_rate_limited,
    "pickup_async": pickup(PickupAsync),
    "pickup_sync": pickup(PickupSync),
    "herd": herd,
    # Deep tables (issue 13, target 3; bench/deep.py).
    "drain_deep": drain(BenchAsync, ballast="deep"),
    "drain_pruning": drain(BenchAsync, ballast="prunable"),
    "drain_pruning_control": drain(BenchAsync, ballast="kept"),
    "promote_deep": deep.promote_deep,
    # Hours of load, in minutes (issue 13, target 4; bench/soak.py).
    "soak": soak,
    "bulk_retry": bulk_retry,
    "bulk_retry_unpaced": bulk_retry_unpaced,
    "bulk_control": bulk_control,
    "bulk_retry_paced": bulk_retry_paced,
    # Jobs that wait for other jobs (issue 29; bench/workflows.py).
    "fan_in": fan_in,
    "chains": chains,
}
GROUPS = {
    "enqueue": [
        "enqueue_one",
        "enqueue_unique",
        "enqueue_many",
        "enqueue_many_unique",
        "floor_enqueue",
    ],
    "drain": ["drain_async", "drain_sync", "drain_async_p2", "drain_sync_p2"],
    # A worker of concurrency 10 beside the hand-written floor in its batch size (issue 13).
    "floors": ["floor_10", "floor_statements", "drain_async", "floor"],
    # Scaling with worker processes (issue 13): one, two and four of concurrency 10.
    "scaling": ["drain_async", "drain_async_p2", "drain_async_p4"],
    "pinned": ["drain_async_pinned", "floor_pinned"],
    "hooks": ["drain_async", "noop_hook", "slow_hook", "slow_hook_sync"],
    "pickup": ["pickup_async", "pickup_sync"],
    # atomic=True beside the plain sync handlers it must stay within half of (decision 015).
    "atomic": ["drain_sync", "drain_atomic", "drain_sync_write", "drain_atomic_write"],
    "fail": ["fail_in_place", "fail_dead_letter"],
    "bulk": ["bulk_retry", "bulk_control", "bulk_retry_unpaced", "bulk_retry_paced"],
    "deep": ["drain_async", "drain_deep", "drain_pruning_control", "drain_pruning", "promote_deep"],
    "observability": [
        "drain_async",
        "drain_metrics",
        "drain_observed",
        "drain_sync",
        "drain_sync_observed",
    ],
    # Flows beside the plain drain they are held to (issue 29: at least 70 % of its jobs/s).
    "workflows": ["drain_async", "fan_in", "chains"],
    # The soak takes half an hour: run it on its own (--scenario soak).
    "all": [name for name in SCENARIOS if name != "soak"],
}
