"""Admissions and releases of one key racing on two connections (decision 045): exactly
one job takes a free slot, a slot freed by an uncommitted release reads as held, the first
use of a key serialises on its slot rows, and the leader's sweep admits a job that missed
a hand-off. Committed transactions on real connections, so the row locks really race."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from awa_django.keys import KEY_METADATA
from awa_django.storage.models import Job, KeySlot
from awa_django.storage.sql import keys as keys_sql
from testproject.shop.demo import database_url

pytestmark = pytest.mark.django_db(transaction=True)

INSERT = """
INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts,
                          run_lease, errors, metadata, tags, attempted_by)
VALUES ('race_keyed', 'race-keys', '{}', 'available', 2, 0, 25, 0, '[]', %s, '{}', '{}')
RETURNING id
"""


def metadata(key: str = "k", max_in_flight: int = 1) -> str:
    return json.dumps({KEY_METADATA: {"key": key, "max": max_in_flight}})


@pytest.fixture
def connections() -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any]]]:
    url = database_url(connection.settings_dict)
    first, second = psycopg.connect(url), psycopg.connect(url)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def enqueue(
    conn: psycopg.Connection[Any], key: str = "k", max_in_flight: int = 1
) -> tuple[int, str]:
    """A keyed job inserted on `conn`, and its state after admission as `conn` sees it."""
    row = conn.execute(INSERT, [metadata(key, max_in_flight)]).fetchone()
    assert row is not None
    admitted = conn.execute("SELECT state FROM awa_jobs_hot WHERE id = %s", [row[0]]).fetchone()
    assert admitted is not None
    return row[0], admitted[0]


def state(job_id: int) -> str:
    return Job.objects.get(id=job_id).state


def test_two_admissions_of_one_free_slot_admit_exactly_one(connections: Any) -> None:
    a, b = connections
    seed, _ = enqueue(a)
    a.commit()
    a.execute("UPDATE awa_jobs_hot SET state = 'completed' WHERE id = %s", [seed])
    a.commit()  # the key's slot rows exist and its one slot is free
    first, first_state = enqueue(a)  # takes slot 0, locked until commit
    second, second_state = enqueue(b)  # must not take it: SKIP LOCKED, no room left
    assert (first_state, second_state) == ("available", "waiting_slot")
    b.commit()
    a.commit()
    assert (state(first), state(second)) == ("available", "waiting_slot")
    assert list(KeySlot.objects.values_list("job_id", flat=True)) == [first]


def test_a_slot_freed_by_an_uncommitted_release_reads_as_held(connections: Any) -> None:
    a, b = connections
    holder, _ = enqueue(a)
    a.commit()
    a.execute("UPDATE awa_jobs_hot SET state = 'cancelled' WHERE id = %s", [holder])
    # The release is not committed: the newcomer waits rather than share the slot.
    newcomer, newcomer_state = enqueue(b)
    assert newcomer_state == "waiting_slot"
    b.commit()
    a.commit()
    # The release's hand-off ran before the newcomer existed: it missed it...
    assert state(newcomer) == "waiting_slot"
    assert not KeySlot.objects.filter(job_id__isnull=False).exists()
    # ...and the leader's sweep admits it.
    assert keys_sql.job_admit_waiting(limit=10).run("default") == 1
    assert state(newcomer) == "available"


def test_a_committed_release_hands_its_slot_to_the_waiting_job(connections: Any) -> None:
    a, b = connections
    holder, _ = enqueue(a)
    waiting, _ = enqueue(a)
    a.commit()
    b.execute("UPDATE awa_jobs_hot SET state = 'completed' WHERE id = %s", [holder])
    assert state(waiting) == "waiting_slot"  # not before the release commits
    b.commit()
    assert state(waiting) == "available"


def test_the_first_use_of_a_key_serialises_on_its_slot_rows(connections: Any) -> None:
    a, b = connections
    first, _ = enqueue(a)  # creates the key's slot rows, uncommitted
    result: dict[str, Any] = {}

    def second_enqueue() -> None:
        result["job"] = enqueue(b)
        b.commit()

    thread = threading.Thread(target=second_enqueue)
    thread.start()
    thread.join(timeout=0.5)
    assert thread.is_alive()  # waits for the rows the first transaction is creating
    a.commit()
    thread.join(timeout=10)
    assert not thread.is_alive()
    second, second_state = result["job"]
    assert second_state == "waiting_slot"
    assert (state(first), state(second)) == ("available", "waiting_slot")


def test_a_lowered_max_admits_nobody_while_a_high_slot_release_is_uncommitted(
    connections: Any,
) -> None:
    a, b = connections
    low, _ = enqueue(a, max_in_flight=2)
    high, _ = enqueue(a, max_in_flight=2)
    a.execute(
        "INSERT INTO awa_key_limits (kind, max_in_flight, updated_by, updated_at) "
        "VALUES ('race_keyed', 1, '', now())"
    )
    a.commit()
    assert dict(KeySlot.objects.values_list("job_id", "slot")) == {low: 0, high: 1}
    b.execute("UPDATE awa_jobs_hot SET state = 'completed' WHERE id = %s", [low])
    b.commit()  # slot 0 is free; slot 1, above the new max, still held
    a.execute("UPDATE awa_jobs_hot SET state = 'completed' WHERE id = %s", [high])
    # The release of slot 1 is not committed (it may roll back): a newcomer must not take
    # slot 0 beside it, or two would be admitted under a max of 1.
    newcomer, newcomer_state = enqueue(b, max_in_flight=2)
    b.commit()
    assert newcomer_state == "waiting_slot"
    a.rollback()  # the completion did not happen: `high` still holds slot 1
    assert (state(high), state(newcomer)) == ("available", "waiting_slot")
    assert keys_sql.job_admit_waiting(limit=10).run("default") == 0
    a.execute("UPDATE awa_jobs_hot SET state = 'completed' WHERE id = %s", [high])
    a.commit()  # its release hands slot 0 to the newcomer
    assert state(newcomer) == "available"
    assert list(KeySlot.objects.exclude(job_id=None).values_list("job_id", "slot")) == [
        (newcomer, 0)
    ]
