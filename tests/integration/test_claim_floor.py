"""The dispatcher's claim floor (decision 027) on real PostgreSQL: a claim starts where the
previous full claim ended, rows that appear below the floor are still claimed, and under a
snapshot held open elsewhere the floor keeps a claim from re-reading what was claimed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection, transaction

from awa_django.conf import QueueConfig
from awa_django.snapshot import JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.worker.database import Database
from awa_django.worker.dispatcher import Dispatcher
from tests.factories import JobFactory as BaseJobFactory
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

Q = "floor-q"


class JobFactory(BaseJobFactory):
    kind = "floor_job"
    queue = Q


def dispatcher(db: Database, concurrency: int, claimed: list[int]) -> Dispatcher:
    async def execute(row: JobSnapshot, release: Callable[[], None]) -> None:
        claimed.append(row.id)
        release()

    return Dispatcher(QueueConfig(Q, concurrency=concurrency), db, execute, "w-floor", 0.2)


URGENT = Statement(
    "test_insert_urgent",
    """INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts,
           run_at, created_at, run_lease, errors, metadata, tags, attempted_by)
       VALUES ('floor_job', %(queue)s, '{}', 'available', 1, 0, 25, now(), now(), 0, '[]',
               '{}', '{}', '{}')
       RETURNING id""",
)


async def insert_urgent(db: Database) -> int:
    """A priority-1 job, committed without a NOTIFY (the ORM cannot run in the loop)."""
    row = await db.run(Query(URGENT, {"queue": Q}, query.first))
    assert row is not None
    return int(row[0])


async def claim_round(d: Dispatcher, claimed: list[int]) -> list[int]:
    """One run_once, its attempts finished: the ids it claimed, in claim order."""
    before = len(claimed)
    await d.run_once()
    await asyncio.gather(*d.tasks)
    return claimed[before:]


def test_a_row_that_appears_below_the_floor_is_claimed_by_the_next_whole_scan() -> None:
    first = [job.id for job in JobFactory.create_batch(4, priority=2)]

    async def step(db: Database) -> list[list[int]]:
        claimed: list[int] = []
        d = dispatcher(db, 2, claimed)
        rounds = [await claim_round(d, claimed)]
        urgent = await insert_urgent(db)  # below the floor, and no NOTIFY wakes anyone
        rounds.append(await claim_round(d, claimed))
        rounds.append(await claim_round(d, claimed))  # short from the floor: look again
        assert d._maybe_more, "a short claim from the floor must ask for a whole scan"
        rounds.append(await claim_round(d, claimed))
        assert rounds[-1] == [urgent]
        return rounds

    rounds = with_db(step)
    assert rounds[:3] == [first[:2], first[2:], []]


def test_a_wake_up_makes_the_next_claim_scan_the_whole_queue() -> None:
    JobFactory.create_batch(2, priority=2)

    async def step(db: Database) -> list[int]:
        claimed: list[int] = []
        d = dispatcher(db, 2, claimed)
        await claim_round(d, claimed)
        urgent = await insert_urgent(db)
        d.wake()  # as the listener does on a NOTIFY for the queue
        assert d.floor.start() is None
        got = await claim_round(d, claimed)
        assert got == [urgent]
        return got

    with_db(step)


def dispatch_index_entries_read(after: jobs_sql.DispatchKey | None) -> int:
    """Index entries the claim's scan of awa_jobs_dispatch_idx reads (the transaction's own
    statistics counter; the claim is rolled back)."""
    query = jobs_sql.job_claim_many(
        lease_now=True, queue=Q, limit=10, worker_id="w-read", deadline_seconds=0, after=after
    )
    counter = "SELECT pg_stat_get_xact_tuples_returned('awa_jobs_dispatch_idx'::regclass)"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(counter)
        (before,) = cursor.fetchone()
        cursor.execute(query.statement.sql, query.params)
        assert len(cursor.fetchall()) == 10
        cursor.execute(counter)
        (after_claim,) = cursor.fetchone()
        transaction.set_rollback(True)
    return int(after_claim - before)


def test_under_a_held_snapshot_a_claim_from_the_floor_skips_what_was_claimed() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt,
                   max_attempts, run_at, created_at, run_lease, errors, metadata, tags,
                   attempted_by)
               SELECT 'floor_job', %s, '{}', 'available', 2, 0, 25,
                      now() - interval '1 hour' + g * interval '1 ms', now(), 0, '[]', '{}',
                      '{}', '{}'
               FROM generate_series(1, 2100) g""",
            [Q],
        )
        cursor.execute("ANALYZE awa_jobs_hot")
    settings = connection.get_connection_params()
    with psycopg.connect(**settings) as held:
        held.execute("SELECT txid_current()")  # an xid: the horizon stays put until rollback

        async def step(db: Database) -> jobs_sql.DispatchKey | None:
            claimed: list[int] = []
            d = dispatcher(db, 100, claimed)
            for _ in range(20):
                await claim_round(d, claimed)
            assert len(claimed) == 2000
            return d.floor.start()

        floor = with_db(step)
        assert floor is not None
        from_floor = dispatch_index_entries_read(floor)
        whole = dispatch_index_entries_read(None)
        held.rollback()
    # From the start of the queue the scan reads an entry for each of the 2,000 claimed
    # jobs before reaching the 100 that wait; from the floor it starts at them.
    assert whole >= 2000, whole
    assert from_floor <= 20, from_floor


def fill_backlog(count: int) -> None:
    """`count` available jobs in one statement, and fresh statistics: the table the
    planner sees behind a backlog."""
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt,
                   max_attempts, run_at, created_at, run_lease, errors, metadata, tags,
                   attempted_by)
               SELECT 'floor_job', %s, '{}', 'available', 2, 0, 25, now(), now(), 0, '[]',
                      '{}', '{}', '{}'
               FROM generate_series(1, %s) g""",
            [Q, count],
        )
        cursor.execute("ANALYZE awa_jobs_hot")


def test_a_batched_completion_finds_its_rows_by_primary_key_whatever_the_statistics() -> None:
    """Statistics taken while a backlog waited say nothing is running; the completion must
    still look its rows up by id, not scan the 'running' entries of awa_jobs_state_id_part_idx
    (under a held snapshot that scan reads every job claimed since it began)."""
    fill_backlog(20000)
    with connection.cursor() as cursor:
        ids = list(range(1, 101))
        query = jobs_sql.job_complete_many(ids=ids, leases=[1] * 100, results=[None] * 100)
        cursor.execute("EXPLAIN " + query.statement.sql, query.params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "awa_jobs_hot_pkey" in plan, plan
    assert "awa_jobs_state_id_part_idx" not in plan, plan


def test_a_heartbeat_finds_its_jobs_by_primary_key_whatever_the_statistics() -> None:
    """As the completion: the heartbeat (which writes leases, decision 030) must not read
    the 'running' entries of awa_jobs_state_id_part_idx either."""
    fill_backlog(20000)
    with connection.cursor() as cursor:
        query = leases_sql.lease_heartbeat_many(
            ids=list(range(1, 101)), leases=[1] * 100, deadlines=[0.0] * 100
        )
        cursor.execute("EXPLAIN " + query.statement.sql, query.params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "awa_jobs_hot_pkey" in plan, plan
    assert "awa_jobs_state_id_part_idx" not in plan, plan


@pytest.mark.parametrize("limit", [10, 100])
@pytest.mark.parametrize("after", [None, (2, "2020-01-01T00:00:00+00:00", 0)])
def test_a_claim_is_planned_once_per_connection(
    after: jobs_sql.DispatchKey | None, limit: int
) -> None:
    """A claim of a worker-sized batch is planned once and then run from PostgreSQL's
    generic plan: the limit is in the statement's text, so the generic plan knows how few
    rows come and costs no more than a custom one. With `LIMIT $n` PostgreSQL assumed a
    tenth of the queue, kept re-planning every claim (0.2 ms of a 1 ms claim), and the
    generic plan it rejected hash-joined the candidates against the whole table."""
    fill_backlog(20000)
    db = Database("default", "awa-test-plan", max_size=1)
    claim = jobs_sql.job_claim_many(
        lease_now=True, queue=Q, limit=limit, worker_id="w-plan", deadline_seconds=0, after=after
    )
    with psycopg.connect(**db.kwargs) as conn:
        for _ in range(12):  # psycopg prepares on the 5th use; PostgreSQL decides after 5 more
            conn.execute("BEGIN")
            claim.run_on(conn)
            conn.execute("ROLLBACK")
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%%candidates AS (%%'"
        ).fetchall()
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute("BEGIN")
        explained = conn.execute("EXPLAIN " + claim.statement.sql, claim.params).fetchall()
        conn.execute("ROLLBACK")
    plan = "\n".join(line for (line,) in explained)
    assert len(plans) == 1 and plans[0][0] > 0, plans
    assert "awa_jobs_dispatch_idx" in plan and "awa_jobs_hot_pkey" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan and "Hash Join" not in plan, plan
