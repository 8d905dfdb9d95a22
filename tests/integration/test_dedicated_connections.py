"""The hot path's own connections (decision 031): each queue's claims and the completer's
batches run on a connection outside the pool, so they never wait for it, and a
connection that broke or that a cancelled statement left behind is replaced.
Transactional tests: the runtime commits on its own connections."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection

from awa_django.conf import QueueConfig
from awa_django.snapshot import JobSnapshot
from awa_django.storage import query
from awa_django.storage.models import Job
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.worker.completer import Completer
from awa_django.worker.database import Database, DedicatedConnection
from awa_django.worker.dispatcher import Dispatcher
from tests.factories import JobFactory as BaseJobFactory
from tests.integration.test_runtime_services import in_thread
from tests.runtime_db import first_claim

pytestmark = pytest.mark.django_db(transaction=True)

Q = "dedicated-q"
BACKEND_PID = Statement("test_backend_pid", "SELECT pg_backend_pid()")
SLEEP = Statement("test_sleep", "SELECT pg_sleep(5)")


class JobFactory(BaseJobFactory):
    kind = "dedicated_job"
    queue = Q


async def backend_pid(runner: Database | DedicatedConnection) -> int:
    row = await runner.run(Query(BACKEND_PID, {}, query.first))
    assert row is not None
    return int(row[0])


def terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


def backend_exists(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return bool(cursor.fetchone()[0])


async def released(row: JobSnapshot, release: Callable[[], None]) -> None:
    release()


def test_claims_and_completions_do_not_wait_for_the_pool() -> None:
    """With the pool's only connection taken for longer than its 10 s timeout would allow,
    a queue still claims and the completer still commits, each on a connection of its
    own, and the claims hand out run_leases of their connection's lease epoch."""
    JobFactory.create_batch(3)

    async def main() -> tuple[list[JobSnapshot], list[JobSnapshot | None], set[int]]:
        db = Database("default", "awa-dedicated-test", max_size=1)
        await db.open()
        try:
            dispatcher = Dispatcher(QueueConfig(Q, concurrency=3), db, released, "w-ded", 0.2)
            completer = Completer(db, forced=lambda: False)
            flushing = asyncio.ensure_future(completer.run())
            async with db.pool.connection() as taken:
                pool_pid = taken.info.backend_pid
                rows, _ = await asyncio.wait_for(dispatcher._claim(3), 5)
                committed = await asyncio.wait_for(
                    asyncio.gather(*(completer.complete(row, None) for row in rows)), 5
                )
                pids = {
                    pool_pid,
                    await backend_pid(dispatcher.claim_connection),
                    await backend_pid(completer.connection),
                }
            flushing.cancel()
            return rows, committed, pids
        finally:
            await db.close()

    rows, committed, pids = asyncio.run(main())
    assert len(rows) == 3
    assert all(first_claim(row.run_lease) and row.run_lease != 1 for row in rows)
    assert [row and row.state for row in committed] == ["completed"] * 3
    assert len(pids) == 3  # the pool's, the claims', the completer's
    assert Job.objects.filter(queue=Q, state="completed").count() == 3


def test_a_dedicated_connection_is_replaced_after_its_backend_is_terminated() -> None:
    """The statement that finds its backend gone fails as an outage does (the caller's
    back-off waits it out); the next one opens a new connection. Closing the database
    closes it."""

    async def main() -> tuple[int, int, bool]:
        db = Database("default", "awa-dedicated-test", max_size=1)
        await db.open()
        try:
            dedicated = db.dedicated()
            first = await backend_pid(dedicated)
            await in_thread(lambda: terminate(first))
            with pytest.raises(psycopg.OperationalError):
                await backend_pid(dedicated)
            second = await backend_pid(dedicated)
        finally:
            await db.close()
        return first, second, await in_thread(lambda: backend_exists(second))

    first, second, left_open = asyncio.run(main())
    assert second != first
    assert not left_open


def test_a_cancelled_statement_does_not_leave_its_connection_busy() -> None:
    """A statement cancelled mid-flight (a forced shutdown, a bounded step) leaves the
    connection ready for the next one, or replaced: never inside a transaction or a
    running statement."""

    async def main() -> int:
        db = Database("default", "awa-dedicated-test", max_size=1)
        await db.open()
        try:
            dedicated = db.dedicated()
            await backend_pid(dedicated)
            sleeping = asyncio.ensure_future(dedicated.run(Query(SLEEP, {}, query.plain)))
            await asyncio.sleep(0.3)
            sleeping.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sleeping
            return await asyncio.wait_for(backend_pid(dedicated), 3)
        finally:
            await db.close()

    assert asyncio.run(main()) > 0
