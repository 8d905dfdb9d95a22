"""The named statements of storage/sql/keys.py (per-key concurrency, decision 045): each
run against real rows, the sweep's plan read from EXPLAIN."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection

from awa_django.keys import KEY_METADATA, key_digest
from awa_django.storage.models import Job, KeyLimit, KeySlot
from awa_django.storage.sql import keys as keys_sql
from tests.factories import JobFactory
from tests.integration.sql_helpers import big_table, explain, run

pytestmark = pytest.mark.django_db
__all__ = ["big_table"]  # the fixture, imported for the plan test

Q = "core-sql-keys"


def keyed(key: str, max_in_flight: int = 1, **fields: Any) -> Job:
    """A job of `key` written through the ORM: the insert trigger admits it or not."""
    metadata = {KEY_METADATA: {"key": key, "max": max_in_flight}}
    job = JobFactory(**{"queue": Q, "kind": "keyed_sql", "metadata": metadata, **fields})
    job.refresh_from_db()
    return job


def test_job_admit_waiting_admits_the_head_of_each_key_with_room() -> None:
    holder = keyed("a")
    waiting = [keyed("a") for _ in range(3)]
    full = [keyed("b"), keyed("b")]
    assert [j.state for j in waiting] == ["waiting_slot"] * 3
    # Nothing has room: the sweep writes no row.
    assert run(keys_sql.job_admit_waiting, limit=100) == 0
    KeyLimit.objects.create(kind="keyed_sql", max_in_flight=2)
    assert run(keys_sql.job_admit_waiting, limit=100) == 2  # a's head and b's head
    assert Job.objects.get(id=waiting[0].id).state == "available"
    assert [Job.objects.get(id=j.id).state for j in waiting[1:]] == ["waiting_slot"] * 2
    assert Job.objects.get(id=full[1].id).state == "available"
    assert Job.objects.get(id=holder.id).state == "available"


def test_job_admit_waiting_takes_a_slot_freed_without_a_hand_off() -> None:
    holder = keyed("a")
    waiting = keyed("a")
    # As after a release whose hand-off found nobody (the waiting job was not committed
    # yet then): the slot row is free and the job still waits.
    KeySlot.objects.filter(job_id=holder.id).update(job_id=None)
    assert run(keys_sql.job_admit_waiting, limit=100) == 1
    assert Job.objects.get(id=waiting.id).state == "available"


@pytest.mark.usefixtures("big_table")
def test_job_admit_waiting_reads_the_waiting_index() -> None:
    """On a table of 20,000 other jobs, the waiting lines come from their partial index,
    never from a scan of the table."""
    for n in range(50):
        keyed(f"k{n % 5}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_jobs_hot")
    plan = explain(keys_sql.job_admit_waiting, limit=100)
    # The waiting rows are in two indexes (the state index holds every state but available
    # and completed): either serves the sweep, which reads them all.
    assert re.search(r"Index (Only )?Scan using awa_jobs_(waiting_slot|state_id_part)_idx", plan)
    assert "Seq Scan on awa_jobs_hot" not in plan, plan


# The hand-off's choice of a key's next waiting job, as awa_key_release (migration 0017)
# writes it: one key's line, in dispatch order, must come from the waiting index, not from
# the state index's every waiting row of every key.
HAND_OFF = """
EXPLAIN SELECT w.id FROM awa_jobs_hot w
WHERE w.concurrency_key = %s AND w.state = 'waiting_slot'
ORDER BY w.priority, w.run_at, w.id LIMIT 1 FOR UPDATE SKIP LOCKED
"""


@pytest.mark.usefixtures("big_table")
def test_the_hand_off_reads_one_keys_line_from_the_waiting_index() -> None:
    for n in range(400):
        keyed(f"k{n % 4}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_jobs_hot")
        cursor.execute(HAND_OFF, [key_digest("k1")])
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "Index Scan using awa_jobs_waiting_slot_idx" in plan, plan
    assert "Index Cond: (concurrency_key = " in plan, plan


def test_key_busiest_lists_keys_by_jobs_holding_or_waiting() -> None:
    keyed("a")
    keyed("a")
    keyed("a")
    keyed("b", max_in_flight=3)
    busiest = run(keys_sql.key_busiest, limit=10)
    assert [(k.key, k.in_flight, k.waiting) for k in busiest] == [("a", 1, 2), ("b", 1, 0)]
    assert run(keys_sql.key_busiest, limit=1)[0].key == "a"


def test_key_waiting_by_queue_counts_waiting_jobs_per_queue() -> None:
    keyed("a")
    keyed("a")
    keyed("a", queue="other-keys")
    assert run(keys_sql.key_waiting_by_queue) == {Q: 1, "other-keys": 1}


def test_the_digest_is_the_same_in_python_and_in_the_trigger() -> None:
    job = keyed("é-tenant/42")
    assert job.concurrency_key is not None
    assert bytes(job.concurrency_key) == key_digest("é-tenant/42")
