"""The leader vacuums the queue's tables where autovacuum will not (decision 027), on real
PostgreSQL. The test turns autovacuum off for `awa_jobs_hot` alone (a table reloption), so
it means the same on a server with autovacuum on or off."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from awa_django.worker.database import Database
from awa_django.worker.maintenance import reclaimer
from awa_django.worker.maintenance.reclaimer import Reclaimer
from tests.runtime_db import with_db
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 15_000  # more than reclaimer.DEAD_ROWS


def execute(statement: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement)


def dead_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'awa_jobs_hot'")
        return int(cursor.fetchone()[0])


def oldest_running_xid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8")
        return int(cursor.fetchone()[0])


@pytest.fixture
def autovacuum_off_for_jobs() -> Iterator[None]:
    execute("ALTER TABLE awa_jobs_hot SET (autovacuum_enabled = false)")
    yield
    execute("ALTER TABLE awa_jobs_hot RESET (autovacuum_enabled)")


def leave_dead_rows(count: int) -> None:
    """Insert and delete `count` jobs, and publish the counts to the statistics now."""
    execute(
        f"""INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt,
               max_attempts, run_at, created_at, run_lease, errors, metadata, tags,
               attempted_by)
            SELECT 'reclaim_job', 'reclaim', '{{}}', 'available', 2, 0, 25, now(), now(), 0,
                   '[]', '{{}}', '{{}}', '{{}}'
            FROM generate_series(1, {count})"""
    )
    execute("DELETE FROM awa_jobs_hot WHERE kind = 'reclaim_job'")
    execute("SELECT pg_stat_force_next_flush()")


async def reclaim(db: Database, leader: Reclaimer) -> list[str]:
    due = await leader.run_once()
    if leader.task is not None:
        await leader.task
    return due


@pytest.mark.usefixtures("autovacuum_off_for_jobs")
def test_the_leader_vacuums_a_table_autovacuum_skips_once_its_dead_rows_pile_up() -> None:
    leave_dead_rows(ROWS)
    assert dead_rows() >= ROWS
    leader_state: dict[str, list[str]] = {}

    async def step(db: Database) -> None:
        leader = Reclaimer(db)
        leader_state["first"] = await reclaim(db, leader)
        # Nothing new died since: the next pass leaves the table alone.
        leader_state["again"] = await reclaim(db, leader)

    with_db(step)
    assert "awa_jobs_hot" in leader_state["first"]
    assert "awa_jobs_hot" not in leader_state["again"]
    assert dead_rows() < ROWS // 10


@pytest.mark.usefixtures("autovacuum_off_for_jobs")
def test_rows_a_held_snapshot_kept_are_vacuumed_once_it_ends_not_before() -> None:
    passes: list[list[str]] = []
    with psycopg.connect(**connection.get_connection_params()) as held:
        # Holds the horizon until it rolls back.
        (xid,) = held.execute("SELECT txid_current()").fetchone() or (0,)
        leave_dead_rows(ROWS)
        # The reclaimer tells "the snapshot is still held" from "it ended" by the cluster's
        # oldest running transaction. Another session's transaction that began before ours
        # (another test database's, on a shared or parallel server) would be that oldest
        # one, and its commit between the passes would look like ours ending: wait until
        # ours is the oldest, so the passes below see only our snapshot come and go.
        wait_until(lambda: oldest_running_xid() == xid, 60, "the held transaction to be the oldest")

        async def pinned(db: Database) -> Reclaimer:
            leader = Reclaimer(db)
            passes.append(await reclaim(db, leader))  # removes nothing: the snapshot sees them
            passes.append(await reclaim(db, leader))  # so it does not try again
            return leader

        leader = with_db(pinned)
        assert dead_rows() >= ROWS
        held.rollback()

    async def released(db: Database) -> None:
        leader.db = db
        passes.append(await reclaim(db, leader))

    with_db(released)
    assert ["awa_jobs_hot" in names for names in passes] == [True, False, True]
    assert dead_rows() < ROWS // 10


@pytest.mark.usefixtures("autovacuum_off_for_jobs")
def test_a_few_dead_rows_are_not_worth_a_vacuum() -> None:
    leave_dead_rows(reclaimer.DEAD_ROWS // 10)

    async def step(db: Database) -> list[str]:
        return await reclaim(db, Reclaimer(db))

    assert "awa_jobs_hot" not in with_db(step)
