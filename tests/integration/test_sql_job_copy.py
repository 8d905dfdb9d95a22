"""The named statements of `awa_django/storage/sql/job_copy.py` (enqueue_many's COPY path)
run against real PostgreSQL.

Tests run in one transaction, so `now()` is one instant throughout; rows that must be
"due" or "stale" are moved into the past explicitly (see sql_helpers).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from django.utils import timezone

from awa_django.storage.models import Job
from awa_django.storage.sql import job_copy
from tests.integration.sql_helpers import (
    run,
    transaction_now,
)

pytestmark = pytest.mark.django_db


# -- job_reserve_ids / job_copy_many (enqueue_many's COPY path, decision 026) -------------
@dataclasses.dataclass(frozen=True)
class CopyRowTemplate:
    kind: str = "core_copy"
    queue: str = "core-copy"
    state: str = "available"
    priority: int = 3
    max_attempts: int = 4
    run_at: dt.datetime | None = None
    metadata: str = '{"m": 1}'
    tags: list[str] = dataclasses.field(default_factory=lambda: ["t"])


def test_job_reserve_ids_draws_ascending_ids_at_the_transaction_clock() -> None:
    ids, now = run(job_copy.job_reserve_ids, count=3, channels=[])
    assert len(ids) == 3 and ids == sorted(ids) and now == transaction_now()
    assert run(job_copy.job_reserve_ids, count=1, channels=[])[0][0] > ids[-1]


def test_job_copy_many_writes_rows_with_the_reserved_ids() -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    scheduled = CopyRowTemplate(state="scheduled", run_at=later)
    ids = job_copy.job_copy_many(
        "default", [(CopyRowTemplate(), '{"n":1}'), (scheduled, '{"n":2}')], channels=[]
    )
    first, second = (Job.objects.get(id=i) for i in ids)
    assert (first.kind, first.queue, first.state, first.priority, first.max_attempts) == (
        "core_copy",
        "core-copy",
        "available",
        3,
        4,
    )
    assert (first.args, first.metadata, first.tags, first.errors) == ({"n": 1}, {"m": 1}, ["t"], [])
    assert (first.attempt, first.run_lease, first.attempted_by) == (0, 0, [])
    assert first.run_at == first.created_at == transaction_now()
    assert (second.state, second.run_at, second.args) == ("scheduled", later, {"n": 2})
