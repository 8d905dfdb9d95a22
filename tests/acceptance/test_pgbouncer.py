"""Django and `awa_worker` through a real PgBouncer in transaction-pooling mode
(`pool_mode=transaction`, PgBouncer 1.18 from Debian in CI): every statement of the app and
the worker goes through it; LISTEN goes past it (`AWA["LISTEN_DATABASE"]`), and without
that the worker polls and says why (decision 020)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.db import connection

from testproject.shop.demo import database_url
from tests.waiting import wait_until

from .conftest import ROOT
from .pgbouncer import REQUIRED_ENV, PgBouncer, pgbouncer_binary

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

NO_LISTEN = "no LISTEN connection"


@pytest.fixture
def bouncer() -> Iterator[PgBouncer]:
    binary = pgbouncer_binary()
    if binary is None:
        if os.environ.get(REQUIRED_ENV):
            pytest.fail(f"pgbouncer is not installed and {REQUIRED_ENV} is set")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    started = PgBouncer(binary, connection.settings_dict)
    try:
        started.wait_ready(connection.settings_dict["NAME"])
        yield started
    finally:
        started.stop()


def pooled_env(bouncer: PgBouncer, listen: str | None) -> dict[str, str]:
    env = {
        "DATABASE_URL": bouncer.url(connection.settings_dict["NAME"]),
        "DATABASE_POOLED": "1",
        "PGBOUNCER_PORT": str(bouncer.port),
    }
    if listen is not None:
        env["AWA_LISTEN_DATABASE"] = listen
    return env


def assert_no_errors(log: str) -> None:
    """The worker retries what fails (so jobs would still complete): what must not happen
    through the pooler shows in its log instead, e.g. a prepared statement that another
    server connection never saw (`prepared statement "_pg3_0" does not exist`)."""
    problems = [line for line in log.splitlines() if " ERROR " in line or " failed (" in line]
    assert not problems, "\n".join(problems[:10])


def run_app(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-m", "tests.acceptance.through_pgbouncer"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_app_and_worker_work_through_pgbouncer_in_transaction_mode(bouncer, start_worker):
    direct = database_url(connection.settings_dict)
    env = pooled_env(bouncer, listen=direct)
    worker = start_worker(env=env)
    app = run_app(env)
    assert app.returncode == 0, app.stdout + app.stderr + worker.output() + bouncer.output()
    assert "all steps passed" in app.stdout
    # The worker's pool went through PgBouncer (its clients carry the worker's name)...
    clients = bouncer.show("CLIENTS")
    assert "awa-worker" in clients, clients
    # ...and it LISTENed past it, on the direct connection: no polling fallback.
    assert NO_LISTEN not in worker.output()
    assert worker.stop() == 0, worker.output()
    assert_no_errors(worker.output())


def test_without_a_listen_database_the_worker_polls_and_says_why(bouncer, start_worker):
    import awa_django
    from testproject.shop.jobs import SendReceipt

    worker = start_worker(env=pooled_env(bouncer, listen=None))
    wait_until(lambda: NO_LISTEN in worker.output(), what="the polling warning")
    assert "DISABLE_SERVER_SIDE_CURSORS" in worker.output()
    assert 'AWA["LISTEN_DATABASE"]' in worker.output()
    job = awa_django.enqueue(SendReceipt(order_id=7100))
    wait_until(
        lambda: awa_django.Client().get_job(job.id).state == "completed",
        what="the polling worker to complete the job",
    )
    assert worker.stop() == 0, worker.output()
    assert_no_errors(worker.output())
