"""Jobs the acceptance tests run in real worker processes. Each records its execution so
tests can count attempts across processes."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from django.db import connection

import awa_django
from awa_django import Job


def record(job: Job[object]) -> None:
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
def acc_noop(job: Job[AccNoop]) -> None:
    record(job)


@awa_django.job(AccSleep, queue="acc")
def acc_sleep(job: Job[AccSleep]) -> None:
    record(job)
    deadline = time.monotonic() + job.args.seconds
    while time.monotonic() < deadline and not job.is_cancelled():
        time.sleep(0.02)


@awa_django.job(AccBlock, queue="acc")
def acc_block(job: Job[AccBlock]) -> None:
    record(job)
    time.sleep(job.args.seconds)
