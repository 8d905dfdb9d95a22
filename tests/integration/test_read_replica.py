"""`AWA["READ_DATABASE"]` (decision 020): the admin's list, detail and dashboard and
`awa_status` read the replica alias; actions write the primary, and the page right after
one reads the primary too.

The "replica" alias is a second database, not a streaming replica of "default" (none is
set up in CI): its rows are written here on purpose to differ from the primary's, so each
assertion shows which database a page read.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from awa_django import Client
from awa_django.storage.models import Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(databases=["default", "replica"])

CHANGELIST = "admin:awa_django_job_changelist"
DASHBOARD = "admin:awa_django_dashboard"


class ReplicaJobFactory(JobFactory):
    class Meta:
        database = "replica"


@pytest.fixture
def replica_reads(settings: Any) -> None:
    settings.AWA = {**settings.AWA, "READ_DATABASE": "replica"}


def listed(response: Any) -> dict[int, tuple[str, str, str]]:
    """id -> (kind, state, alias read from) of the rows a changelist response showed."""
    return {j.id: (j.kind, j.state, j._state.db) for j in response.context["cl"].result_list}


def twins() -> tuple[Job, Job]:
    """The same job on both databases, the replica's copy lagging behind (other kind)."""
    primary = JobFactory(kind="on_primary")
    replica = ReplicaJobFactory(id=primary.id, kind="on_replica", args=primary.args)
    return primary, replica


@pytest.mark.usefixtures("replica_reads")
def test_the_list_and_the_detail_page_read_the_replica(admin_client):
    primary, _ = twins()
    only_on_primary = JobFactory(kind="not_replicated_yet")

    rows = listed(admin_client.get(reverse(CHANGELIST)))
    assert rows == {primary.id: ("on_replica", "available", "replica")}

    detail = admin_client.get(reverse("admin:awa_django_job_change", args=[primary.id]))
    assert detail.status_code == 200
    assert detail.context["original"]._state.db == "replica"
    assert detail.context["original"].kind == "on_replica"
    # Not on the replica yet: the admin says it does not exist (redirect with a message).
    missing = admin_client.get(reverse("admin:awa_django_job_change", args=[only_on_primary.id]))
    assert missing.status_code == 302


def test_without_read_database_everything_reads_the_primary(admin_client):
    primary, _ = twins()
    rows = listed(admin_client.get(reverse(CHANGELIST)))
    assert rows == {primary.id: ("on_primary", "available", "default")}


@pytest.mark.usefixtures("replica_reads")
def test_an_action_writes_the_primary_and_the_page_after_it_reads_the_primary(admin_client):
    primary, _ = twins()
    data = {"action": "cancel_jobs", "_selected_action": [primary.id], "index": 0}

    after = admin_client.post(reverse(CHANGELIST), data, follow=True)

    assert Job.objects.using("default").get(id=primary.id).state == "cancelled"
    assert Job.objects.using("replica").get(id=primary.id).state == "available"
    assert listed(after) == {primary.id: ("on_primary", "cancelled", "default")}
    # The next plain page view is back on the (lagging) replica.
    assert listed(admin_client.get(reverse(CHANGELIST))) == {
        primary.id: ("on_replica", "available", "replica")
    }


@pytest.mark.usefixtures("replica_reads")
def test_the_dashboard_reads_the_replica_and_pause_writes_the_primary(admin_client):
    ReplicaJobFactory(queue="replica-only")

    def queues(response: Any) -> dict[str, bool]:
        return {row["name"]: row["paused"] for row in response.context["queues"]}

    assert "replica-only" in queues(admin_client.get(reverse(DASHBOARD)))

    after = admin_client.post(
        reverse("admin:awa_django_queue_operation"),
        {"queue": "email", "operation": "pause"},
        follow=True,
    )

    assert Client("default").queue_stats() and _paused("default", "email")
    assert not _paused("replica", "email")
    seen_after = queues(after)
    assert seen_after["email"] is True and "replica-only" not in seen_after  # the primary
    assert queues(admin_client.get(reverse(DASHBOARD)))["email"] is False  # the replica again


def _paused(using: str, queue: str) -> bool:
    return any(q.paused for q in Client(using).queue_stats() if q.queue == queue)


@pytest.mark.usefixtures("replica_reads")
def test_awa_status_reads_the_replica_unless_told_otherwise():
    ReplicaJobFactory(queue="replica-only")
    JobFactory(queue="primary-only")

    def queue_names(*args: str) -> set[str]:
        out = StringIO()
        call_command("awa_status", "--json", *args, stdout=out)
        return {q["queue"] for q in json.loads(out.getvalue())["queues"]}

    names = queue_names()
    assert "replica-only" in names and "primary-only" not in names
    names = queue_names("--database", "default")
    assert "primary-only" in names and "replica-only" not in names
