"""`manage.py awa_status`: the table, `--json`, and the message for an unmigrated database."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

import awa_django
from awa_django.client import Client
from awa_django.storage.models import WorkerInstance
from tests.factories import JobFactory

ROOT = Path(__file__).resolve().parents[2]


def status(*args: str) -> str:
    out = StringIO()
    call_command("awa_status", *args, stdout=out)
    return out.getvalue()


def seed() -> None:
    JobFactory.create_batch(3, queue="email", state="available", run_at=timezone.now())
    JobFactory(queue="email", state="running")
    JobFactory.create_batch(2, queue="default", state="failed")
    JobFactory(queue="email", state="completed", finalized_at=timezone.now())
    Client().pause_queue("email", by="ops")
    WorkerInstance.objects.create(
        worker_id="w-1", hostname="box", pid=77, queues={"email": 4}, leader=True
    )


@pytest.mark.django_db
def test_table_shows_each_queue_with_its_figures():
    seed()
    lines = status().splitlines()
    header = lines[0].split()
    rows = {line.split()[0]: line.split() for line in lines[1:3]}

    assert header[:12] == [
        "queue",
        "scheduled",
        "waiting_parents",
        "available",
        "running",
        "waiting",
        "retryable",
        "failed",
        "cancelled",
        "for_slot",
        "dead",
        "done/1m",
    ]
    email = dict(zip(header, rows["email"], strict=False))
    assert (email["available"], email["running"], email["done/1m"], email["done/5m"]) == (
        "3",
        "1",
        "1",
        "1",
    )
    assert rows["email"][-5:] == ["paused", "by", "ops", "concurrency", "4"]
    assert dict(zip(header, rows["default"], strict=False))["failed"] == "2"
    assert "box:77 leader" in "\n".join(lines)


@pytest.mark.django_db
def test_the_busiest_concurrency_keys_show_in_the_text_and_the_json():
    assert "concurrency keys" not in status()  # no key in use: no section
    for _ in range(3):
        awa_django.enqueue({"n": 1}, kind="status_keyed", queue="email", concurrency_key="acme")
    text = status()
    assert "Busiest concurrency keys" in text
    assert "  acme: 1 in flight, 2 waiting" in text
    doc = json.loads(status("--json"))
    assert doc["busiest_keys"] == [{"key": "acme", "in_flight": 1, "waiting": 2}]


@pytest.mark.django_db
def test_runtime_overrides_show_in_the_table_and_the_json():
    Client().set_queue_limits("email", concurrency=2, rate_limit=(5, 3))
    email = next(line for line in status().splitlines() if line.startswith("email"))
    assert email.endswith("concurrency 2 (override), rate 5/s burst 3 (global, override)")
    doc = json.loads(status("--json"))
    queue = next(q for q in doc["queues"] if q["queue"] == "email")
    assert (queue["concurrency_override"], queue["rate_override"]) == (
        2,
        {"rate": 5.0, "burst": 3},
    )
    Client().clear_queue_limits("email")
    email = next(line for line in status().splitlines() if line.startswith("email"))
    assert email.split()[-3:] == ["active", "concurrency", "4"]


@pytest.mark.django_db
def test_json_is_one_document_for_scripts():
    seed()
    doc = json.loads(status("--json", "--window", "10"))

    queues = {q["queue"]: q for q in doc["queues"]}
    assert doc["window_minutes"] == 10
    assert queues["email"]["depth"]["available"] == 3
    assert queues["email"]["running"] == 1
    assert queues["email"]["completed_in_window"] == 1
    assert queues["email"]["paused"] is True and queues["email"]["paused_by"] == "ops"
    assert 0 <= queues["email"]["lag_seconds"] < 60
    assert queues["default"]["depth"]["failed"] == 2
    assert [w["hostname"] for w in doc["workers"]] == ["box"]
    assert doc["workers"][0]["queues"] == {"email": 4}


@pytest.mark.django_db
def test_no_workers_and_no_jobs_still_prints_the_configured_queues():
    WorkerInstance.objects.create(
        worker_id="gone",
        hostname="old",
        pid=1,
        last_seen_at=timezone.now() - dt.timedelta(hours=2),
    )
    text = status()
    assert text.splitlines()[1].split()[0] == "default"
    assert "No live workers" in text


@pytest.mark.django_db
def test_a_bad_window_is_a_command_error():
    with pytest.raises(CommandError, match="--window"):
        status("--window", "0")


@pytest.mark.django_db
def test_missing_tables_say_to_run_migrate():
    # The rename is undone with the test's transaction.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE awa_jobs_hot RENAME TO awa_jobs_hot_hidden")
    with pytest.raises(CommandError, match=r"run `python manage.py migrate`"):
        status()


@pytest.fixture
def empty_database():
    """The URL of a freshly created database with no tables, dropped afterwards."""
    db = connection.settings_dict
    server: dict[str, Any] = {
        "host": db["HOST"] or "localhost",
        "port": db["PORT"] or 5432,
        "user": db["USER"] or None,
        "password": db["PASSWORD"] or None,
    }
    name = f"awa_admin_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**server, dbname="postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    credentials = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        credentials += ":" + quote(db["PASSWORD"], safe="")
    try:
        yield f"postgres://{credentials}@{server['host']}:{server['port']}/{name}"
    finally:
        with psycopg.connect(**server, dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.django_db
def test_unmigrated_database_exits_non_zero_with_advice_and_no_traceback(empty_database):
    env = {**os.environ, "DATABASE_URL": empty_database}
    done = subprocess.run(
        [sys.executable, "manage.py", "awa_status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "run `python manage.py migrate`" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.django_db
def test_kinds_no_live_worker_handles_are_listed():
    WorkerInstance.objects.create(
        worker_id="w-old", hostname="box", pid=78, queues={"default": 4}, kinds=["send_receipt"]
    )
    JobFactory(kind="send_receipt")
    JobFactory.create_batch(2, kind="brand_new_kind", state="scheduled")
    doc = json.loads(status("--json"))
    assert doc["unhandled_kinds"] == {"brand_new_kind": 2}
    assert doc["workers"][0]["kinds"] == ["send_receipt"]
    assert "Kinds no live worker handles (waiting jobs):\n  brand_new_kind: 2" in status()
