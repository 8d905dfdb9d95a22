"""The waker role (worker/waker.py, decision 025) on real LISTEN connections: several
Listeners in one event loop stand for several worker processes. One session holds a
queue's role and alone listens for its hints, so a hint wakes only its dispatcher; giving
the role up wakes every process; a session that ends takes its role with it; a full
holder hands the role over so the next job is claimed by another process without waiting
for a poll.

Transactional tests: the listeners commit and LISTEN on their own connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from django.db import connection

import awa_django
from awa_django.channels import WAKER_VACANT, channel_for, role_channel_for
from awa_django.conf import QueueConfig
from awa_django.execution.context import JobContext
from awa_django.snapshot import JobSnapshot
from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement
from awa_django.storage.sql.wakers import waker_key
from awa_django.worker.database import Database
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.inflight import InFlight
from awa_django.worker.listener import Listener
from tests.integration.test_runtime_services import in_thread, run_loop, until

pytestmark = pytest.mark.django_db(transaction=True)

Q = "waker-role"
SIDE = "waker-side"  # a second queue: its notification tells that Q's was handled before
NEVER = 3600.0  # poll intervals: nothing below may rely on a poll
Execute = Callable[[JobSnapshot, Callable[[], None]], Awaitable[None]]


@dataclass
class WakerProbe:
    n: int


@awa_django.job(WakerProbe, queue=Q)
def waker_probe(job: JobContext[WakerProbe]) -> None:
    raise AssertionError("the dispatchers here run jobs through their own `execute`")


class Counting(Dispatcher):
    """A dispatcher that counts its wake-ups and its claim statements."""

    def __init__(
        self,
        queue: str,
        db: Database,
        execute: Execute | None = None,
        concurrency: int = 10,
    ) -> None:
        super().__init__(
            QueueConfig(queue, concurrency),
            db,
            execute or _never,
            f"w-{db.kwargs['application_name']}",
            NEVER,
            standby_interval=NEVER,
        )
        self.woken = 0
        self.vacancies = 0  # `vacant` notifications heard
        self.claims = 0

    def wake(self) -> None:
        self.woken += 1
        super().wake()

    def notified(self, payload: str) -> None:
        self.vacancies += payload == WAKER_VACANT
        super().notified(payload)

    async def _claim(self, limit: int) -> tuple[list[JobSnapshot], bool]:
        self.claims += 1
        return await super()._claim(limit)


async def _never(row: JobSnapshot, release: Callable[[], None]) -> None:
    raise AssertionError("this test claims nothing")


@dataclass
class Process:
    """One worker process's LISTEN side: its listener and one dispatcher per queue."""

    name: str
    listener: Listener
    q: Counting
    side: Counting

    def backend_pid(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [self.name]
            )
            return int(cursor.fetchone()[0])


@asynccontextmanager
async def processes(count: int) -> AsyncIterator[list[Process]]:
    started: list[Process] = []
    tasks: list[asyncio.Future[None]] = []
    try:
        for index in range(count):
            name = f"awa-waker-test-{index}"
            db = Database("default", name, max_size=2)
            q, side = Counting(Q, db), Counting(SIDE, db)
            listener = Listener(db, [q, side], InFlight())
            started.append(Process(name, listener, q, side))
            tasks.append(asyncio.ensure_future(listener.run()))
        await until(lambda: all(p.listener.connected.is_set() for p in started))
        yield started
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for process in started:
            await process.listener.db.close()


def notify(channel: str, payload: str = "") -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel, payload])


LISTENING = Statement("test_listening_channels", "SELECT pg_listening_channels()")


async def listening_to(process: Process) -> set[str]:
    """The channels `process`'s LISTEN session listens on."""
    rows = await process.listener.execute(
        Query(LISTENING, {}, query.plain), process.listener.generation
    )
    assert rows is not None
    return {row[0] for row in rows}


def role_holder_pids(queue: str) -> list[int]:
    """The backends holding `queue`'s role (a bigint key shows as two int4 halves)."""
    key = waker_key(queue) & 0xFFFFFFFFFFFFFFFF
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid::int8 = %s AND objid::int8 = %s AND objsubid = 1",
            [key >> 32, key & 0xFFFFFFFF],
        )
        return [row[0] for row in cursor.fetchall()]


async def handled(listening: list[Process], payload_on_q: str) -> None:
    """Notify Q's hint channel, then SIDE's role channel with a vacancy: once SIDE's
    dispatcher of a process has heard it, that process has handled the notification on Q
    too, if its session listens there (a session delivers in order)."""
    before = [p.side.vacancies for p in listening]
    await in_thread(lambda: notify(channel_for(Q), payload_on_q))
    await in_thread(lambda: notify(role_channel_for(SIDE), WAKER_VACANT))
    await until(lambda: all(p.side.vacancies > n for p, n in zip(listening, before, strict=True)))


def test_one_session_holds_the_role_and_a_hint_wakes_only_its_dispatcher() -> None:
    async def main() -> None:
        async with processes(3) as (a, b, c):
            assert [await p.q.role.take() for p in (a, b, c)] == [True, False, False]
            assert await a.q.role.take() is False  # held already: never taken twice
            assert await in_thread(lambda: role_holder_pids(Q)) == [await in_thread(a.backend_pid)]
            before = [p.q.woken for p in (a, b, c)]
            await handled([a, b, c], "")
            assert [p.q.woken - n for p, n in zip((a, b, c), before, strict=True)] == [1, 0, 0]
            # The standbys' sessions are not even woken by the hint: only the holder's
            # LISTENs on the queue's hint channel; every session on its role channel.
            hint, role = channel_for(Q), role_channel_for(Q)
            assert [hint in await listening_to(p) for p in (a, b, c)] == [True, False, False]
            assert [role in await listening_to(p) for p in (a, b, c)] == [True, True, True]

    run_loop(main)


def test_giving_the_role_up_wakes_every_process_and_another_takes_it() -> None:
    async def main() -> None:
        async with processes(2) as (a, b):
            assert await a.q.role.take()
            woken = (a.q.woken, b.q.woken)
            await a.q.role.give_up()  # sends the vacancy on Q's role channel
            await until(lambda: (a.q.vacancies, b.q.vacancies) == (1, 1))
            assert not a.q.role.held
            assert channel_for(Q) not in await listening_to(a)  # hints are the holder's
            assert await b.q.role.take()
            assert await in_thread(lambda: role_holder_pids(Q)) == [await in_thread(b.backend_pid)]
            await handled([a, b], "")
            # The vacancy woke both; the hint that followed woke the new holder only.
            assert (a.q.woken, b.q.woken) == (woken[0] + 1, woken[1] + 2)

    run_loop(main)


def test_a_session_that_ends_takes_its_role_with_it() -> None:
    async def main() -> None:
        async with processes(2) as (a, b):
            assert await b.q.role.take()
            assert not await a.q.role.take()
            generation = b.listener.generation
            pid = await in_thread(b.backend_pid)
            await in_thread(lambda: _terminate(pid))
            await until(lambda: b.listener.generation > generation)
            assert not b.q.role.held  # the client side knows at once
            # The server releases the lock as the session ends: wait for it, with a deadline.
            deadline = asyncio.get_running_loop().time() + 5.0
            while await in_thread(lambda: role_holder_pids(Q)):
                assert asyncio.get_running_loop().time() < deadline, "the lock outlived it"
                await asyncio.sleep(0.01)
            assert await a.q.role.take()
            await until(b.listener.connected.is_set)  # b reconnects as a standby
            assert not await b.q.role.take()
            # The new holder hears the hints; b's new session, a standby's, does not.
            assert channel_for(Q) in await listening_to(a)
            assert channel_for(Q) not in await listening_to(b)
            assert role_channel_for(Q) in await listening_to(b)

    run_loop(main)


def _terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_full_holder_hands_the_role_over_and_the_next_job_needs_no_poll() -> None:
    """Two processes of one slot each, polls an hour apart: the holder claims the first
    job, is full and gives the role up; the other takes it and claims the second job."""
    started: dict[int, str] = {}
    finish = asyncio.Event()

    def executing(worker: str) -> Execute:
        async def execute(row: JobSnapshot, release: Callable[[], None]) -> None:
            started[row.id] = worker
            await finish.wait()
            release()

        return execute

    async def main() -> None:
        names = [f"awa-waker-full-{i}" for i in range(2)]
        dbs = [Database("default", name, max_size=3) for name in names]
        for db in dbs:
            await db.open()
        dispatchers = [
            Counting(Q, db, executing(name), concurrency=1)
            for name, db in zip(names, dbs, strict=True)
        ]
        listeners = [Listener(db, [d], InFlight()) for db, d in zip(dbs, dispatchers, strict=True)]
        tasks = [asyncio.ensure_future(t.run()) for t in listeners]
        tasks += [asyncio.ensure_future(d.run()) for d in dispatchers]
        try:
            await until(lambda: sum(d.role.held for d in dispatchers) == 1)
            first = await in_thread(lambda: awa_django.enqueue(WakerProbe(1)).id)
            await until(lambda: first in started)
            second = await in_thread(lambda: awa_django.enqueue(WakerProbe(2)).id)
            await until(lambda: second in started)
            assert started[first] != started[second]
            # Both full now: neither holds the role (the first to free a slot claims).
            await until(lambda: not any(d.role.held for d in dispatchers))
        finally:
            finish.set()
            for dispatcher in dispatchers:
                await dispatcher.stop()
            await asyncio.gather(*tasks[2:], return_exceptions=True)
            for task in tasks[:2]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for db in dbs:
                await db.close()

    run_loop(main)
