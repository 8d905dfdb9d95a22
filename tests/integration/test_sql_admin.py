"""The named statements of `awa_django/storage/sql/admin.py` run against real PostgreSQL.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import pytest
from django.db import connection

from awa_django.storage.models import ActiveLease
from awa_django.storage.sql import admin as admin_sql
from awa_django.storage.sql import leases as leases_sql
from tests.integration.sql_helpers import (
    JobFactory,
    jobs,
    run,
    running,
    snapshot,
    transaction_now,
)

pytestmark = pytest.mark.django_db


# -- admin --------------------------------------------------------------------------------
def test_job_cancel_many_cancels_non_terminal_jobs_and_leaves_leases_to_their_statement() -> None:
    live = running()
    queued = JobFactory()
    done = JobFactory(state="completed")
    # Raw, to see the statement's last column: whether it sent the cancel hint.
    with connection.cursor() as cursor:
        cursor.execute(admin_sql.JOB_CANCEL_MANY.sql, {"ids": [live.id, queued.id, done.id]})
        by_id = {row[0]: row for row in cursor.fetchall()}
    assert set(by_id) == {live.id, queued.id}
    assert by_id[live.id][-1] == ""  # pg_notify() ran for the running attempt
    assert by_id[queued.id][-1] is None  # ... and not for a queued job
    assert snapshot(live.id)["state"] == snapshot(queued.id)["state"] == "cancelled"
    assert snapshot(live.id)["errors"] == []  # T19: no error entry
    assert snapshot(done.id)["state"] == "completed"
    assert ActiveLease.objects.filter(job_id=live.id).exists()  # lease_delete_for_jobs' job
    run(leases_sql.lease_delete_for_jobs, ids=[live.id, queued.id])
    assert not ActiveLease.objects.exists()


def test_job_retry_many_resets_attempts_and_keeps_errors() -> None:
    failed = JobFactory(state="failed", attempt=3, run_lease=3, errors=[{"error": "x"}])
    cancelled = JobFactory(state="cancelled", attempt=1, run_lease=1)
    completed = JobFactory(state="completed", attempt=1)
    result = jobs(admin_sql.job_retry_many, ids=[failed.id, cancelled.id, completed.id])
    assert sorted(r.id for r in result) == [failed.id, cancelled.id]
    row = snapshot(failed.id)
    assert (row["state"], row["attempt"], row["run_lease"], row["errors"]) == (
        "available",
        0,
        3,
        [{"error": "x"}],
    )
    assert row["finalized_at"] is None and row["run_at"] == transaction_now()
    assert snapshot(completed.id)["state"] == "completed"
