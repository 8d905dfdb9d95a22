"""Migration 0014 (per-key concurrency, decision 045) upgrades a table with jobs in flight:
they keep running and finishing as before, without a key, and keyed jobs work at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from awa_django.keys import KEY_METADATA
from awa_django.storage.models import Job
from awa_django.storage.sql import jobs as jobs_sql
from tests.factories import JobFactory, job_at_migration
from tests.integration.sql_helpers import claim

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("awa_django", "0012_cron_resumed_at")
Q = "keys-migration"


@pytest.fixture
def at_0012() -> Iterator[None]:
    MigrationExecutor(connection).migrate([BEFORE])
    try:
        yield
    finally:
        call_command("migrate", "awa_django", verbosity=0)


def test_jobs_in_flight_finish_after_the_upgrade_and_keys_work_at_once(at_0012: None) -> None:
    running = job_at_migration(BEFORE, queue=Q, state="running", attempt=1, run_lease=4)
    waiting = job_at_migration(BEFORE, queue=Q, state="available")
    call_command("migrate", "awa_django", verbosity=0)

    (done,) = jobs_sql.job_complete_many(ids=[running.pk], leases=[4], results=[None]).run(
        "default"
    )
    assert done.state == "completed"
    (claimed,) = claim(queue=Q)
    assert claimed.id == waiting.pk
    assert Job.objects.filter(concurrency_key__isnull=False).count() == 0
    first = JobFactory(queue=Q, metadata={KEY_METADATA: {"key": "acme", "max": 1}})
    second = JobFactory(queue=Q, metadata={KEY_METADATA: {"key": "acme", "max": 1}})
    states = dict(Job.objects.filter(id__in=[first.id, second.id]).values_list("id", "state"))
    assert states == {first.id: "available", second.id: "waiting_slot"}
