"""The worker survives its connections being killed and PostgreSQL restarting."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from django.db import connection

import awa_django
from awa_django.storage.models import Job
from testproject.testjobs.jobs import AccNoop
from tests.waiting import wait_until

from .test_metrics_worker import endpoint, get
from .test_worker_process import listening

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def terminate_worker_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'awa-worker%%'"
        )
        return cursor.fetchone()[0]


def all_completed() -> bool:
    return not Job.objects.exclude(state="completed").exists()


def test_worker_reconnects_after_its_backends_are_terminated(start_worker):
    worker = start_worker("--queue", "acc=4")
    wait_until(listening, what="worker LISTEN connection")
    awa_django.enqueue_many([AccNoop(i) for i in range(50)])
    wait_until(all_completed, what="first batch")
    assert terminate_worker_backends() >= 2
    awa_django.enqueue_many([AccNoop(i) for i in range(50)])
    wait_until(all_completed, timeout=30, what="jobs after the backends were terminated")
    wait_until(listening, timeout=30, what="LISTEN re-established")
    assert Job.objects.filter(state="completed").count() == 100
    assert worker.stop() == 0


RESTART = os.environ.get("AWA_TEST_PG_RESTART_CMD") or (
    "pg_ctlcluster --skip-systemctl-redirect "
    + (
        " ".join(sorted(os.listdir("/etc/postgresql"))[:1])
        if os.path.isdir("/etc/postgresql")
        else ""
    )
    + " main restart"
)


@pytest.mark.skipif(
    not os.environ.get("CI") and not os.environ.get("AWA_TEST_PG_RESTART"),
    reason="restarts the PostgreSQL server: runs in CI, or locally with AWA_TEST_PG_RESTART=1",
)
@pytest.mark.skipif(shutil.which("pg_ctlcluster") is None, reason="needs pg_ctlcluster")
@pytest.mark.exclusive  # the restart drops every connection of the server, not just ours
def test_worker_carries_on_after_postgresql_restarts(start_worker):
    worker = start_worker("--queue", "acc=4", "--metrics-port", "0")
    base = endpoint(worker)
    wait_until(listening, what="worker LISTEN connection")
    wait_until(lambda: get(f"{base}/readyz")[0] == 200, what="ready")
    awa_django.enqueue_many([AccNoop(i) for i in range(20)])
    wait_until(all_completed, what="first batch")
    connection.close()
    restart = subprocess.Popen(RESTART.split())
    # While the server is away /readyz says so within 5 s, and recovers once it is back.
    wait_until(lambda: get(f"{base}/readyz")[0] == 503, timeout=5, what="/readyz 503")
    assert restart.wait(timeout=120) == 0
    wait_until(lambda: _reachable(), timeout=60, what="PostgreSQL back")
    wait_until(lambda: get(f"{base}/readyz")[0] == 200, timeout=30, what="/readyz 200 again")
    awa_django.enqueue_many([AccNoop(i) for i in range(20)])
    wait_until(all_completed, timeout=60, what="jobs after the restart")
    assert worker.proc.poll() is None  # it waited and reconnected, it did not exit
    assert worker.stop() == 0


def _reachable() -> bool:
    try:
        connection.close()
        connection.ensure_connection()
        return True
    except Exception:
        return False
