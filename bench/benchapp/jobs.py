"""Benchmark jobs on queue `bench`: no-op handlers (async, sync and atomic sync), pickup
probes that record when the handler started in `job.result` (stored in the `result`
column), a handler that fails for good at once (the failure path, dead-lettered or not),
and the soak's mix of successes, retries and failures."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.db import connection

import awa_django
from awa_django import JobContext

BENCH_QUEUE = "bench"


@dataclass
class BenchAsync:
    n: int


@dataclass
class BenchSync:
    n: int


@dataclass
class BenchAtomic:
    n: int


@dataclass
class BenchSyncWrite:
    n: int


@dataclass
class BenchAtomicWrite:
    n: int


@dataclass
class BenchKeyed:
    n: int


@dataclass
class BenchFail:
    n: int


@dataclass
class BenchSoak:
    n: int


@dataclass
class PickupAsync:
    n: int


@dataclass
class PickupSync:
    n: int


@awa_django.job(BenchAsync, queue=BENCH_QUEUE)
async def bench_async(job: JobContext[BenchAsync]) -> None:
    return None


# drain_keyed: 100 concurrency keys, at most 5 jobs of each admitted at once (decision 045).
@awa_django.job(
    BenchKeyed, queue=BENCH_QUEUE, concurrency_key=lambda args: args.n % 100, max_in_flight=5
)
async def bench_keyed(job: JobContext[BenchKeyed]) -> None:
    return None


@awa_django.job(BenchSync, queue=BENCH_QUEUE)
def bench_sync(job: JobContext[BenchSync]) -> None:
    return None


@awa_django.job(BenchAtomic, queue=BENCH_QUEUE, atomic=True)
def bench_atomic(job: JobContext[BenchAtomic]) -> None:
    """A sync no-op with atomic=True. It writes nothing, so its outcome takes the plain
    batched path (decision 023): what atomic=True costs a handler that finds nothing to
    do. The cost of the transaction itself is drain_atomic_write's."""
    return None


def _insert_one_row(job_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_writes (job_id) VALUES (%s)", [job_id])


@awa_django.job(BenchSyncWrite, queue=BENCH_QUEUE)
def bench_sync_write(job: JobContext[BenchSyncWrite]) -> None:
    """One INSERT in autocommit, then the batched completion."""
    _insert_one_row(job.id)


@awa_django.job(BenchAtomicWrite, queue=BENCH_QUEUE, atomic=True)
def bench_atomic_write(job: JobContext[BenchAtomicWrite]) -> None:
    """The same INSERT, committed with the guarded completion in one transaction on the
    thread's Django connection (decision 015)."""
    _insert_one_row(job.id)


@awa_django.job(PickupAsync, queue=BENCH_QUEUE)
async def pickup_async(job: JobContext[PickupAsync]) -> None:
    job.result = time.time()


@awa_django.job(PickupSync, queue=BENCH_QUEUE)
def pickup_sync(job: JobContext[PickupSync]) -> None:
    job.result = time.time()


@awa_django.job(BenchFail, queue=BENCH_QUEUE)
async def bench_fail(job: JobContext[BenchFail]) -> None:
    raise awa_django.TerminalError("bench: fails for good")


@awa_django.job(BenchSoak, queue=BENCH_QUEUE, max_attempts=2)
async def bench_soak(job: JobContext[BenchSoak]) -> None:
    """The soak's mix by n % 100: 95 succeed, 4 fail their first attempt and succeed on
    the retry, 1 fails for good."""
    share = job.args.n % 100
    if share == 99:
        raise awa_django.TerminalError("bench: soak job fails for good")
    if share >= 95 and job.attempt == 1:
        raise RuntimeError("bench: soak job retried once")
