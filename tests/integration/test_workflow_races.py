"""Workflow races on real connections (decision 043): sibling parents completing at once
promote their child exactly once; an enqueue after a parent and that parent's completion
at once leave the child neither waiting forever nor promoted twice; cascades nest."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from django.db import connection, transaction

import awa_django
from awa_django import Client
from awa_django.storage.models import Job
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.workflows import JobWait
from awa_django.worker.database import connection_kwargs

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "wf-races"


@dataclass
class RaceStep:
    n: int


@awa_django.job(RaceStep, queue=QUEUE)
def race_step(job: awa_django.JobContext[RaceStep]) -> None:
    return None


_LOG = """
CREATE TABLE IF NOT EXISTS wf_race_log (job_id bigint, old_state text, new_state text);
CREATE OR REPLACE FUNCTION wf_race_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO wf_race_log VALUES (NEW.id, OLD.state, NEW.state);
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS wf_race_log ON awa_jobs_hot;
CREATE TRIGGER wf_race_log AFTER UPDATE ON awa_jobs_hot FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION wf_race_log();
"""


@pytest.fixture(autouse=True)
def race_log() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(_LOG)
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS wf_race_log ON awa_jobs_hot; DROP TABLE wf_race_log")


def moves(job_id: int) -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT old_state, new_state FROM wf_race_log WHERE job_id = %s", [job_id])
        return list(cursor.fetchall())


def other() -> psycopg.Connection:
    return psycopg.connect(**connection_kwargs("default", "awa-test-race"))


def test_siblings_completing_at_once_promote_their_child_exactly_once() -> None:
    parents = [awa_django.enqueue(RaceStep(i)) for i in range(2)]
    child = awa_django.enqueue(RaceStep(9), after=parents)
    claimed = jobs_sql.job_claim_many(
        queue=QUEUE, limit=2, worker_id="race", deadline_seconds=300, lease_now=True
    ).run("default")
    assert sorted(r.id for r in claimed) == sorted(p.id for p in parents)
    first, second = claimed
    with other() as a, other() as b:
        # A completes first and holds its transaction open: the child's counter row is
        # locked by it, so B's completion blocks inside its trigger until A commits.
        with a.transaction():
            assert jobs_sql.job_complete_one(
                id=first.id, run_lease=first.run_lease, result=None
            ).run_on(a)
            done = threading.Event()

            def complete_b() -> None:
                with b.transaction():
                    jobs_sql.job_complete_one(
                        id=second.id, run_lease=second.run_lease, result=None
                    ).run_on(b)
                done.set()

            thread = threading.Thread(target=complete_b)
            thread.start()
            assert not done.wait(0.5)  # B waits on A's row lock
            assert JobWait.objects.get(job_id=child.id).pending_parents == 2  # nothing committed
        thread.join(10)
        assert done.is_set()
    assert moves(child.id) == [("waiting_parents", "available")]
    assert JobWait.objects.get(job_id=child.id).pending_parents == 0


def test_enqueue_after_a_parent_while_it_completes_never_loses_the_child() -> None:
    """The enqueue locks the parent: the completion waits for the edge to commit, and its
    trigger (fresh snapshots) then counts it."""
    parent = awa_django.enqueue(RaceStep(1))
    # A first child flags the parent: the second enqueue writes nothing to the parent's
    # row, so only its lock makes the completion wait.
    first = awa_django.enqueue(RaceStep(3), after=[parent])
    (claimed,) = jobs_sql.job_claim_many(
        queue=QUEUE, limit=1, worker_id="race", deadline_seconds=300, lease_now=True
    ).run("default")
    done = threading.Event()
    with other() as worker:
        with transaction.atomic():
            child = awa_django.enqueue(RaceStep(2), after=[parent])

            def complete() -> None:
                with worker.transaction():
                    jobs_sql.job_complete_one(
                        id=claimed.id, run_lease=claimed.run_lease, result=None
                    ).run_on(worker)
                done.set()

            thread = threading.Thread(target=complete)
            thread.start()
            assert not done.wait(0.5)  # the completion waits for the enqueue's lock
        thread.join(10)
        assert done.is_set()
    for job_id in (first.id, child.id):
        assert Job.objects.get(id=job_id).state == "available"
        assert moves(job_id) == [("waiting_parents", "available")]


def test_a_long_chain_cascades_its_cancel_through_nested_triggers() -> None:
    rows = Client().chain(*[RaceStep(i) for i in range(200)])
    Client().cancel(rows[0].id)
    states = set(Job.objects.filter(id__in=[r.id for r in rows]).values_list("state", flat=True))
    assert states == {"cancelled"}
