"""The waiting state where operators look (issue 29, item 5): the leader's
`awa_queue_waiting_parents` gauge and its index-only statement, `awa_status` (table and
JSON), the dashboard's depth and its link to the filtered job list, the Client's state
counts, and the `django.tasks` status of a task waiting on its parents."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

import awa_django
from awa_django import Client
from awa_django.storage.sql import rollups as rollups_sql
from awa_django.tasks.framework import TaskResultStatus
from awa_django.worker.maintenance.depth import QueueDepth
from awa_django.worker.metrics import WorkerMetrics
from testproject.testjobs.jobs import AccNoop
from tests import tasks_for_tests as t
from tests.runtime_db import with_db

from .test_backend import backend

__all__ = ["backend"]  # the fixture, imported for the django.tasks test

Q = "acc"  # AccNoop's queue


def waiting_children(count: int, queue: str = Q) -> list[int]:
    """`count` children of one available parent, all in `waiting_parents`."""
    parent = awa_django.enqueue(AccNoop(0), queue=queue)
    return [awa_django.enqueue(AccNoop(i), after=[parent], queue=queue).id for i in range(count)]


@pytest.mark.django_db
def test_queue_waiting_parents_reads_the_state_index_only() -> None:
    waiting_children(3)
    waiting_children(1, queue="elsewhere")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the test table is tiny
        cursor.execute("EXPLAIN " + rollups_sql.QUEUE_WAITING_PARENTS.sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # Either partial index that leaves completed jobs out serves it (statistics decide).
    assert re.search(
        r"Index Only Scan using awa_jobs_(state_id|queue_state)_part_idx on awa_jobs_hot", plan
    ), plan
    assert "Seq Scan" not in plan, plan
    assert rollups_sql.queue_waiting_parents().run("default") == {Q: 3, "elsewhere": 1}


@pytest.mark.django_db(transaction=True)
def test_the_leader_publishes_the_jobs_waiting_for_their_parents_per_queue() -> None:
    waiting_children(2)
    metrics = WorkerMetrics(prometheus=True)

    with_db(lambda db: QueueDepth(db, metrics, [Q, "idle"]).run_once())
    assert "awa_queue_waiting_parents" not in metrics.render().decode()  # the leader's only
    metrics.is_leader = lambda: True
    text = metrics.render().decode()
    assert f'awa_queue_waiting_parents{{queue="{Q}"}} 2.0' in text
    assert 'awa_queue_waiting_parents{queue="idle"} 0.0' in text


@pytest.mark.django_db
def test_awa_status_counts_the_waiting_children() -> None:
    waiting_children(4)
    out = io.StringIO()
    call_command("awa_status", stdout=out)
    header, *rows = out.getvalue().splitlines()
    row = next(r for r in rows if r.startswith(Q))
    labels = header.split()
    assert dict(zip(labels, row.split(), strict=False))["waiting_parents"] == "4"
    out = io.StringIO()
    call_command("awa_status", "--json", stdout=out)
    [queue] = [q for q in json.loads(out.getvalue())["queues"] if q["queue"] == Q]
    assert queue["depth"]["waiting_parents"] == 4 and queue["depth"]["available"] == 1


@pytest.mark.django_db
def test_the_dashboard_and_the_state_counts_show_the_waiting_children(admin_client: Any) -> None:
    waiting = waiting_children(2)
    assert Client().state_counts()["waiting_parents"] == 2
    page = admin_client.get(reverse("admin:awa_django_dashboard")).content.decode()
    link = re.search(r'href="([^"]*state__exact=waiting_parents[^"]*)"[^>]*>2<', page)
    assert link, page
    listing = admin_client.get(link.group(1).replace("&amp;", "&")).content.decode()
    for job_id in waiting:
        assert reverse("admin:awa_django_job_change", args=[job_id]) in listing


@pytest.mark.django_db
def test_a_task_waiting_on_its_parents_is_ready(backend: Any) -> None:
    parent = t.add.enqueue(1, 2)
    child = awa_django.enqueue(
        {"args": [3, 4], "kwargs": {}}, kind="tests.tasks_for_tests.add", after=[int(parent.id)]
    )
    assert child.state == "waiting_parents"
    assert t.add.get_result(str(child.id)).status == TaskResultStatus.READY
