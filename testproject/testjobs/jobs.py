"""Jobs the acceptance tests run in real worker processes. Each records its execution so
tests can count attempts across processes."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from django.db import connection

import awa_django
from awa_django import JobContext


def record(job: JobContext[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testjobs_execution (job_id, run_lease, pid, at) "
            "VALUES (%s, %s, %s, now())",
            [job.id, job.run_lease, os.getpid()],
        )


@dataclass
class AccNoop:
    n: int = 0


@dataclass
class AccSleep:
    seconds: float


@dataclass
class AccBlock:
    """Sleeps, ignoring the cooperative cancel flag (a stuck handler)."""

    seconds: float


@awa_django.job(AccNoop, queue="acc")
def acc_noop(job: JobContext[AccNoop]) -> None:
    record(job)


@awa_django.job(AccSleep, queue="acc")
def acc_sleep(job: JobContext[AccSleep]) -> None:
    record(job)
    deadline = time.monotonic() + job.args.seconds
    while time.monotonic() < deadline and not job.is_cancelled():
        time.sleep(0.02)


@awa_django.job(AccBlock, queue="acc")
def acc_block(job: JobContext[AccBlock]) -> None:
    record(job)
    time.sleep(job.args.seconds)


@dataclass
class PerfNoop:
    n: int = 0


@awa_django.job(PerfNoop, queue="perf")
def perf_noop(job: JobContext[PerfNoop]) -> None:
    """A sync no-op, for quick throughput checks."""


@dataclass
class PerfAsyncNoop:
    n: int = 0


@awa_django.job(PerfAsyncNoop, queue="perf")
async def perf_async_noop(job: JobContext[PerfAsyncNoop]) -> None:
    """An async no-op, for quick throughput checks."""


@dataclass
class AccPark:
    """Registers a callback and parks; with `hold`, first waits until something outside
    resolves the callback while the job is still running (the early-resolution race)."""

    hold: bool = False
    timeout: float = 600


@awa_django.job(AccPark, queue="acc")
def acc_park(job: JobContext[AccPark]) -> awa_django.WaitForCallback:
    record(job)
    token = job.register_callback(timeout=job.args.timeout)
    if job.args.hold:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _state(job.id) == "running":
            time.sleep(0.02)
    return awa_django.WaitForCallback(token)


@dataclass
class AccWaitInPlace:
    pass


@awa_django.job(AccWaitInPlace, queue="acc")
def acc_wait_in_place(job: JobContext[AccWaitInPlace]) -> None:
    record(job)
    token = job.register_callback(timeout=600)
    job.result = {"payload": job.wait_for_callback(token)}


@dataclass
class AccAsyncWaitInPlace:
    pass


@awa_django.job(AccAsyncWaitInPlace, queue="acc")
async def acc_async_wait_in_place(job: JobContext[AccAsyncWaitInPlace]) -> None:
    token = await job.aregister_callback(timeout=600)
    job.result = {"payload": await job.await_for_callback(token)}


def _state(job_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT state FROM awa_jobs_hot WHERE id = %s", [job_id])
        return cursor.fetchone()[0]


@dataclass
class AccExit:
    code: int = 3


@awa_django.job(AccExit, queue="acc")
def acc_exit(job: JobContext[AccExit]) -> None:
    record(job)
    sys.exit(job.args.code)


@dataclass
class AccSlowHooked:
    """A no-op whose Completed hook sleeps (see apps.py): shutdown must not wait for it."""


@awa_django.job(AccSlowHooked, queue="acc")
def acc_slow_hooked(job: JobContext[AccSlowHooked]) -> None:
    record(job)
