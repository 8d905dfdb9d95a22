"""Coalesced wake-ups across real worker processes (decision 025): idle processes on one
queue run one claim per enqueued job, not one each; a holder that dies leaves no job
waiting for it longer than the standbys' poll."""

from __future__ import annotations

import os
import re
import signal
import urllib.request
from collections.abc import Callable

import pytest
from django.db import connection

import awa_django
from testproject.testjobs.jobs import AccNoop
from testproject.testjobs.models import Execution
from tests.waiting import wait_until

from .conftest import WorkerProcess
from .test_worker_process import listening, state_of, workers_whose_last_statement

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PROCESSES = 4
JOBS = 20
HOUR = "3600"  # a poll interval: nothing in these tests may rely on a poll
CLAIMS = re.compile(r'^awa_dispatch_claim_batch_size_count\{queue="acc"\} (\S+)$', re.M)


def role_holders() -> list[str]:
    """The application names of the worker backends holding a waker role. Every worker here
    has the same kinds and serves only `acc`, so there is one role (decision 032). Its key
    is not computed here: this process's registry also holds the kinds other test modules
    declare, so its kind set is not the workers' own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND a.application_name LIKE 'awa-worker%%'"
        )
        return [row[0] for row in cursor.fetchall()]


def tried_for_the_role(count: int) -> bool:
    """True once `count` processes have tried for the role on their LISTEN connection,
    which each does after the claim it runs on connecting (the one that got it LISTENs for
    the hints next)."""
    tried = "query LIKE '%%pg\\_try\\_advisory\\_lock%%' OR query LIKE 'LISTEN \"awa:%%'"
    return workers_whose_last_statement(tried) >= count


def worker_pid(application_name: str) -> int:
    """The OS pid in a worker's application name, `awa-worker <host>-<pid>-<hex>`."""
    return int(application_name.rsplit("-", 2)[-2])


def completed(job_id: int) -> Callable[[], bool]:
    return lambda: state_of(job_id) == "completed"


def metrics_ports(worker: WorkerProcess, count: int) -> list[int]:
    pattern = re.compile(r"metrics and health on http://[^:]+:(\d+)/")
    return wait_until(
        lambda: ports if len(ports := pattern.findall(worker.output())) == count else None,
        what=f"{count} metrics endpoints",
    )


def claims(ports: list[int]) -> int:
    """Claim statements run so far by every process (their own counters)."""
    total = 0.0
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            total += sum(float(v) for v in CLAIMS.findall(response.read().decode()))
    return round(total)


def test_idle_processes_run_one_claim_per_job_not_one_each(start_worker):
    supervisor = start_worker(
        "--queue",
        "acc=10",
        "--processes",
        str(PROCESSES),
        "--metrics-port",
        "0",
        "--poll-interval",
        HOUR,
        "--standby-poll-interval",
        HOUR,
        fast=False,
    )
    ports = metrics_ports(supervisor, PROCESSES)
    wait_until(lambda: tried_for_the_role(PROCESSES), what="every process to settle")
    wait_until(lambda: len(role_holders()) == 1, what="one process to hold the role")
    before = claims(ports)
    for n in range(JOBS):
        wait_until(completed(awa_django.enqueue(AccNoop(n)).id), what=f"job {n}")
    # One claim per job by the holder; the one after it took the role may land here too.
    # Before the role, each NOTIFY woke all PROCESSES processes: about PROCESSES x JOBS.
    assert JOBS <= claims(ports) - before <= JOBS + 1
    assert len(role_holders()) == 1
    assert supervisor.stop() == 0


def test_a_killed_holder_leaves_no_job_waiting_for_it(start_worker):
    supervisor = start_worker(
        "--queue",
        "acc=10",
        "--processes",
        "2",
        "--poll-interval",
        HOUR,
        "--standby-poll-interval",
        "0.5",
        fast=False,
    )
    wait_until(lambda: listening(2), what="both LISTEN connections")
    (holder,) = wait_until(role_holders, what="a process to hold the role")
    killed = worker_pid(holder)
    os.kill(killed, signal.SIGKILL)  # its session, and the role's lock, end with it
    job = awa_django.enqueue(AccNoop(1))
    # The other process takes the role at its next standby poll and claims at once (or the
    # supervisor's replacement for the killed one claims as it connects).
    wait_until(lambda: state_of(job.id) == "completed", what="the job, without its holder")
    assert Execution.objects.get(job_id=job.id).pid != killed
    wait_until(lambda: (h := role_holders()) and h != [holder], what="a new holder")
    assert supervisor.stop() == 0
