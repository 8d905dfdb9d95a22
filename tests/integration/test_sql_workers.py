"""The named statements of `awa_django/storage/sql/workers.py` run against real PostgreSQL.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from awa_django.storage.models import WorkerInstance
from awa_django.storage.sql import workers as workers_sql
from tests.integration.sql_helpers import (
    AGO,
    run,
)

pytestmark = pytest.mark.django_db


# -- workers ------------------------------------------------------------------------------
def upsert(worker_id: str, completed: int = 0, leader: bool = False) -> None:
    run(
        workers_sql.worker_instance_upsert,
        worker_id=worker_id,
        hostname="host",
        pid=123,
        queues='{"default": 10}',
        leader=leader,
        shutting_down=False,
        completed_count=completed,
    )


def test_worker_instance_upsert_inserts_then_updates() -> None:
    upsert("core-w1")
    upsert("core-w1", completed=5, leader=True)
    worker = WorkerInstance.objects.get(worker_id="core-w1")
    assert (worker.completed_count, worker.leader, worker.queues) == (5, True, {"default": 10})


def test_worker_instance_delete() -> None:
    upsert("core-w1")
    upsert("core-w2")
    run(workers_sql.worker_instance_delete, worker_id="core-w1")
    assert list(WorkerInstance.objects.values_list("worker_id", flat=True)) == ["core-w2"]


def test_worker_instance_prune_forgets_silent_workers() -> None:
    upsert("core-old")
    upsert("core-new")
    WorkerInstance.objects.filter(worker_id="core-old").update(last_seen_at=timezone.now() - AGO)
    run(workers_sql.worker_instance_prune, older_than_seconds=3600)
    assert list(WorkerInstance.objects.values_list("worker_id", flat=True)) == ["core-new"]
