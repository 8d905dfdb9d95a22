"""Lease epochs (decision 029): a worker's claims commit without the WAL flush wait, so a
server crash may lose one after its worker started the job. These tests make that loss by
hand (the row put back as it was before the claim, the lease row gone, the worker's
connections closed, as a crash leaves them) and check that no later claim, a worker's or
a durable one on Django's connection, hands out the lost claim's run_lease again, so the
first attempt's outcome stays stale. And migration 0011 on a table with jobs in flight."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job
from awa_django.storage.query import Query
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.storage.sql.fragments import EPOCH_SPACE
from awa_django.worker.database import Database, connection_kwargs, without_flush_wait
from tests.factories import JobFactory as BaseJobFactory
from tests.factories import job_at_migration
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

Q = "epochs"


class JobFactory(BaseJobFactory):
    kind = "epochs_job"
    queue = Q


def claim_query() -> Query[list[JobSnapshot]]:
    return jobs_sql.job_claim_many(
        lease_now=True, queue=Q, limit=1, worker_id="w-epoch", deadline_seconds=0
    )


def worker_claim() -> JobSnapshot:
    """One claim on a worker's connection (a fresh pool: a fresh lease epoch)."""

    async def step(db: Database) -> JobSnapshot:
        (row,) = await db.run(claim_query())
        return row

    return with_db(step)


def lose(row: JobSnapshot, before: Job) -> None:
    """What a crash that lost `row`'s claim leaves: the job as it was, no lease row."""
    Job.objects.filter(id=row.id).update(
        state=before.state,
        attempt=before.attempt,
        run_lease=before.run_lease,
        attempted_at=before.attempted_at,
        attempted_by=before.attempted_by,
    )
    ActiveLease.objects.filter(job_id=row.id).delete()


def complete(row: JobSnapshot) -> list[JobSnapshot]:
    return jobs_sql.job_complete_many(ids=[row.id], leases=[row.run_lease], results=[None]).run(
        "default"
    )


@pytest.mark.parametrize("after_the_crash", ["worker", "durable"])
@pytest.mark.parametrize("claimed_before", [False, True])
def test_a_claim_lost_in_a_crash_never_hands_out_its_run_lease_again(
    after_the_crash: str, claimed_before: bool
) -> None:
    job = JobFactory()
    if claimed_before:
        # Its last run_lease came from an epoch (claimed, then retried): the lost claim
        # counts on from it, and so would a durable claim that did not jump.
        first = worker_claim()
        Job.objects.filter(id=job.id).update(state="available")
        ActiveLease.objects.filter(job_id=job.id).delete()
        assert first.run_lease >= EPOCH_SPACE
    before = Job.objects.get(id=job.id)
    lost = worker_claim()
    assert lost.run_lease > before.run_lease and lost.run_lease >= EPOCH_SPACE
    lose(lost, before)

    if after_the_crash == "worker":
        again = worker_claim()
    else:
        (again,) = claim_query().run("default")
    assert again.id == job.id
    # Below the lost one only when the row had never been claimed under an epoch and a
    # durable claim counted on from it (1): nothing an epoch hands out is that low.
    assert again.run_lease > lost.run_lease or again.run_lease == before.run_lease + 1 == 1
    # The first attempt, still running somewhere, can no longer finish the job.
    assert complete(lost) == []
    assert [row.id for row in complete(again)] == [job.id]


def test_worker_claims_take_a_later_epoch_on_every_new_connection() -> None:
    JobFactory.create_batch(2)
    first = worker_claim()
    second = worker_claim()
    assert first.run_lease // EPOCH_SPACE < second.run_lease // EPOCH_SPACE


def test_an_epoch_is_on_disk_before_the_take_returns_even_without_synchronous_commit() -> None:
    """A connection whose session commits without the flush wait (a user's OPTIONS, a
    role or server default) still gets an epoch no crash can lose: the take's commit
    waits for the flush of its own WAL. Its WAL starts at or after the insert position
    read just before it and is not empty, so once it is flushed the flush position is
    past that reading, whatever other sessions write meanwhile (their WAL only moves the
    positions further; comparing with the insert position read after the take would
    count their unflushed WAL against this one)."""
    kwargs = without_flush_wait(connection_kwargs("default", "awa-test-epoch"))
    with psycopg.connect(**kwargs) as conn:
        for _ in range(5):
            before = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
            epoch = leases_sql.lease_epoch_take().run_on(conn)
            answer = conn.execute(
                "SELECT pg_current_wal_flush_lsn() > %s::pg_lsn,"
                " current_setting('synchronous_commit')",
                before,
            ).fetchone()
            assert before is not None and answer is not None
            flushed, written = answer
            assert epoch is not None and flushed and written == "off"


# -- migration 0011 -----------------------------------------------------------------------
BEFORE = ("awa_django", "0010_index_diet")


@pytest.fixture
def at_0010() -> Iterator[None]:
    MigrationExecutor(connection).migrate([BEFORE])
    try:
        yield
    finally:
        call_command("migrate", "awa_django", verbosity=0)


def test_migration_0011_upgrades_a_table_with_attempts_in_flight(at_0010: None) -> None:
    # Written with the model as it was at 0010: today's names columns 0010 does not have.
    old = {"queue": Q, "kind": "epochs_job"}
    running = job_at_migration(BEFORE, state="running", attempt=1, run_lease=3, **old)
    ActiveLease.objects.create(job_id=running.pk, run_lease=3, queue=Q, worker_id="old")
    waiting = job_at_migration(BEFORE, state="available", run_lease=2, **old)
    call_command("migrate", "awa_django", verbosity=0)

    claimed = worker_claim()
    assert claimed.id == waiting.id and claimed.run_lease >= EPOCH_SPACE
    # The attempt claimed before the upgrade finishes under its old run_lease.
    (done,) = jobs_sql.job_complete_many(ids=[running.pk], leases=[3], results=[None]).run(
        "default"
    )
    assert (done.state, done.run_lease) == ("completed", 3)
    assert not ActiveLease.objects.filter(job_id=running.pk).exists()
