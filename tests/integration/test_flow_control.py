"""Flow control against real PostgreSQL (decision 017): the global rate bucket's statement
under concurrent takers, the dispatcher's rate gate and overrides driven through
`run_once()`, `Client.set_queue_limits` and the dashboard's limits form.

Transactional tests: the bucket's takers and the runtime commit on their own connections.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.urls import reverse

from awa_django import InvalidQueueLimits, InvalidQueueName, RateLimit
from awa_django.client import Client
from awa_django.conf import QueueConfig
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import Job, QueueState, RateBucket
from awa_django.storage.query import Query
from awa_django.storage.sql import queues as queues_sql
from awa_django.worker.database import Database, connection_kwargs
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.overrides import OverrideReader
from tests.factories import JobFactory as BaseJobFactory
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

Q = "flow-q"
T = TypeVar("T")


class JobFactory(BaseJobFactory):
    kind = "flow_job"
    queue = Q


def db_clock() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        return float(cursor.fetchone()[0])


def bucket_refilled_at() -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM refilled_at)::float8 FROM awa_rate_buckets WHERE queue = %s",
            [Q],
        )
        return float(cursor.fetchone()[0])


# -- the global bucket's statement ---------------------------------------------------------
def test_concurrent_takers_never_exceed_rate_times_elapsed_plus_burst() -> None:
    """Six connections take tokens as fast as they can for 1.5 s of database time; the
    tokens granted in all stay within rate x (last take - creation) + burst, by the
    database clock, and the bucket does refill (more than the burst is granted)."""
    rate, burst = 40.0, 5
    queues_sql.rate_bucket_take(queue=Q, wanted=0, rate=rate, burst=burst).run("default")
    created = bucket_refilled_at()
    end = db_clock() + 1.5
    granted: list[int] = []
    leftovers: list[float] = []  # checked in the main thread: a thread's assert only warns
    kwargs = connection_kwargs("default", "awa-test bucket")

    def taker(seed: int) -> None:
        pick = random.Random(seed)
        with psycopg.connect(**kwargs) as conn:
            while True:
                query = queues_sql.rate_bucket_take(
                    queue=Q, wanted=pick.randint(1, 4), rate=rate, burst=burst
                )
                got, left = query.run_on(conn)
                leftovers.append(left)
                granted.append(got)
                if query_clock(conn) > end:
                    return

    threads = [threading.Thread(target=taker, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    elapsed = bucket_refilled_at() - created
    assert len(leftovers) == len(granted) and all(0 <= left <= burst for left in leftovers)
    assert sum(granted) <= rate * elapsed + burst + 1e-6, (sum(granted), elapsed)
    assert sum(granted) > burst
    assert len(granted) > 6 * 3  # the takers really contended


def query_clock(conn: psycopg.Connection[Any]) -> float:
    row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def test_unused_tokens_go_back_up_to_the_burst() -> None:
    take = queues_sql.rate_bucket_take(queue=Q, wanted=3, rate=0.001, burst=3)
    assert take.run("default")[0] == 3
    assert take.run("default")[0] == 0
    queues_sql.rate_bucket_give_back(queue=Q, unused=2, burst=3).run("default")
    assert take.run("default")[0] == 2
    queues_sql.rate_bucket_give_back(queue=Q, unused=9, burst=3).run("default")
    assert RateBucket.objects.get(queue=Q).tokens == pytest.approx(3, abs=0.01)


def test_queue_control_statements_use_an_index() -> None:
    queues_sql.rate_bucket_take(queue=Q, wanted=1, rate=1, burst=1).run("default")
    queries: list[Query[Any]] = [
        queues_sql.rate_bucket_take(queue=Q, wanted=1, rate=1.0, burst=1),
        queues_sql.rate_bucket_give_back(queue=Q, unused=1, burst=1),
        queues_sql.queue_state_overrides(queues=[Q]),
    ]
    for query in queries:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + query.statement.sql, query.params)
            plan = "\n".join(line for (line,) in cursor.fetchall())
        assert "Index" in plan or "Conflict Arbiter Indexes: awa_rate_buckets_pkey" in plan, plan
        assert "Seq Scan" not in plan, plan


# -- the dispatcher's rate gate -------------------------------------------------------------
def count_statements(db: Database) -> list[str]:
    seen: list[str] = []
    run = db.run

    async def counted(query: Query[T]) -> T:
        seen.append(query.statement.name)
        return await run(query)

    db.run = counted  # type: ignore[method-assign]
    return seen


async def hold(row: JobSnapshot, release: Callable[[], None]) -> None:
    release()


@pytest.mark.parametrize("scope", ["local", "global"])
def test_a_claim_takes_no_more_jobs_than_tokens(scope: str) -> None:
    JobFactory.create_batch(5)
    queue = QueueConfig(Q, concurrency=10, rate_limit=RateLimit(0.01, 2), rate_scope=scope)

    async def step(db: Database) -> tuple[list[int], list[str], float]:
        dispatcher = Dispatcher(queue, db, hold, "w-flow", 0.2)
        statements = count_statements(db)
        claimed = [await dispatcher.run_once(), await dispatcher.run_once()]
        await asyncio.gather(*dispatcher.tasks)
        return claimed, statements, dispatcher._token_due - time.monotonic()

    claimed, statements, token_in = with_db(step)
    assert claimed == [2, 0]  # the burst, then no token: no claim at all
    assert statements.count("job_claim_many") == 1
    expected_takes = 2 if scope == "global" else 0
    assert statements.count("rate_bucket_take") == expected_takes
    assert 90 < token_in <= 100  # the next token is due in 1 / 0.01 s, not at the poll
    assert Job.objects.filter(state="running").count() == 2


def test_a_short_claim_gives_its_tokens_back() -> None:
    JobFactory.create_batch(1)
    queue = QueueConfig(Q, concurrency=10, rate_limit=RateLimit(0.01, 5))

    async def step(db: Database) -> list[str]:
        dispatcher = Dispatcher(queue, db, hold, "w-flow", 0.2)
        statements = count_statements(db)
        await dispatcher.run_once()
        await asyncio.gather(*dispatcher.tasks)
        return statements

    statements = with_db(step)
    assert statements == ["rate_bucket_take", "job_claim_many", "rate_bucket_give_back"]
    assert RateBucket.objects.get(queue=Q).tokens == pytest.approx(4, abs=0.01)


def running() -> int:
    return Job.objects.filter(state="running").count()


async def in_thread(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ORM code off the event loop, closing the thread's connection afterwards (an
    open one would keep the test database from being dropped)."""

    def run() -> T:
        try:
            return call(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(run)


def test_a_rate_limited_dispatcher_sleeps_until_the_next_token_not_the_poll() -> None:
    """Poll every 60 s, 4 jobs, 4 tokens a second: the jobs still all start within
    seconds, so the loop woke for the tokens, not the poll; and it asked the bucket about
    once per token (a spinning loop would ask thousands of times)."""
    jobs = JobFactory.create_batch(4)
    queue = QueueConfig(Q, concurrency=10, rate_limit=RateLimit(4, 1), rate_scope="local")

    async def step(db: Database) -> tuple[int, int]:
        dispatcher = Dispatcher(queue, db, hold, "w-flow", 60.0)
        assert dispatcher.rate is not None
        takes = 0
        take = dispatcher.rate.take

        async def counted(wanted: int) -> Any:
            nonlocal takes
            takes += 1
            return await take(wanted)

        dispatcher.rate.take = counted  # type: ignore[method-assign]
        statements = count_statements(db)
        loop = asyncio.create_task(dispatcher.run())
        deadline = time.monotonic() + 20
        while await in_thread(running) < len(jobs):
            assert time.monotonic() < deadline, "jobs not claimed in time"
            await asyncio.sleep(0.02)
        await dispatcher.stop()
        await loop
        return takes, statements.count("job_claim_many")

    takes, claims = with_db(step)
    assert takes <= 2 * len(jobs) + 2
    assert claims <= len(jobs) + 1


# -- runtime overrides -----------------------------------------------------------------------
def test_the_override_reader_retunes_dispatchers_and_restores_the_settings() -> None:
    queue = QueueConfig(Q, concurrency=4)

    async def step(db: Database) -> list[tuple[int, RateLimit | None]]:
        dispatcher = Dispatcher(queue, db, hold, "w-flow", 0.2)
        reader = OverrideReader(db, [dispatcher], 1.0)
        seen = []

        def now() -> tuple[int, RateLimit | None]:
            return dispatcher.slots.cap, dispatcher.rate.limit if dispatcher.rate else None

        await reader.run_once()
        seen.append(now())
        await in_thread(Client().set_queue_limits, Q, concurrency=9, rate_limit=(3, 2), by="ops")
        await reader.run_once()
        seen.append(now())
        await in_thread(Client().set_queue_limits, Q, rate_limit=7)
        await reader.run_once()
        seen.append(now())
        await in_thread(Client().clear_queue_limits, Q)
        await reader.run_once()
        seen.append(now())
        return seen

    assert with_db(step) == [
        (4, None),
        (9, RateLimit(3, 2)),
        (4, RateLimit(7, 7)),  # whole-row replace: the concurrency override is gone
        (4, None),
    ]


def test_set_queue_limits_stores_the_overrides_and_who_set_them() -> None:
    state = Client().set_queue_limits(Q, concurrency=3, rate_limit=RateLimit(2.5, 4), by="ops")
    state.refresh_from_db()
    assert (state.concurrency_override, state.rate_override, state.burst_override) == (3, 2.5, 4)
    assert state.limits_by == "ops" and not state.paused
    Client().pause_queue(Q)
    cleared = Client().clear_queue_limits(Q)
    cleared.refresh_from_db()
    assert (cleared.concurrency_override, cleared.rate_override, cleared.paused) == (
        None,
        None,
        True,  # limits and pausing are independent
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency must be a whole number 1..100000"),
        ({"concurrency": "5"}, "concurrency must be a whole number 1..100000"),
        ({"concurrency": 10**10}, "concurrency must be a whole number 1..100000"),
        ({"concurrency": True}, "concurrency must be a whole number 1..100000"),
        ({"rate_limit": (float("nan"), 1)}, "the rate must be"),
        ({"rate_limit": (5, 10**12)}, "the burst must be"),
        ({"rate_limit": (0, 1)}, "the rate must be"),
        ({"rate_limit": (5, 0)}, "the burst must be"),
        ({"rate_limit": "fast"}, "a rate limit is"),
    ],
)
def test_bad_limits_raise_a_typed_error_and_store_nothing(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidQueueLimits, match=f"queue '{Q}': {message}"):
        Client().set_queue_limits(Q, **kwargs)
    with pytest.raises(InvalidQueueName):
        Client().set_queue_limits("bad queue!", concurrency=2)
    assert not QueueState.objects.exists()


def test_async_twins_set_and_clear() -> None:
    async def both() -> None:
        await Client().aset_queue_limits(Q, concurrency=2)
        await Client().aclear_queue_limits(Q)
        # The async twins ran in asgiref's sync thread: close its connection there.
        await sync_to_async(connections.close_all)()

    asyncio.run(both())
    assert QueueState.objects.get(queue=Q).concurrency_override is None


# -- the dashboard's form ---------------------------------------------------------------------
@pytest.fixture
def operator(django_user_model: Any) -> Callable[..., Any]:
    from django.contrib.auth.models import Permission

    def login(client: Any, *codenames: str) -> Any:
        user = django_user_model.objects.create_user(
            f"op-{uuid.uuid4().hex[:8]}", password="pw", is_staff=True
        )
        wanted = {"view_job", *codenames}
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="awa_django", codename__in=wanted)
        )
        client.force_login(user)
        return user

    return login


def test_the_dashboard_sets_shows_and_clears_limits(client: Any, operator: Any) -> None:
    user = operator(client, "set_queue_limits")
    url = reverse("admin:awa_django_queue_limits")
    page = client.get(reverse("admin:awa_django_dashboard")).content.decode()
    assert 'id="awa-limits-form"' in page

    done = client.post(
        url,
        {"queue": "email", "operation": "set", "concurrency": "2", "rate": "5", "burst": "3"},
        follow=True,
    )
    state = QueueState.objects.get(queue="email")
    assert (state.concurrency_override, state.rate_override, state.burst_override) == (2, 5, 3)
    assert state.limits_by == user.username
    assert "concurrency 2 (override), rate 5/s burst 3 (global, override)" in (
        done.content.decode()
    )

    client.post(url, {"queue": "email", "operation": "clear"})
    assert QueueState.objects.get(queue="email").concurrency_override is None


def test_the_limits_form_needs_its_permission_and_valid_values(client: Any, operator: Any) -> None:
    operator(client, "pause_queue")
    url = reverse("admin:awa_django_queue_limits")
    page = client.get(reverse("admin:awa_django_dashboard")).content.decode()
    assert 'id="awa-limits-form"' not in page
    assert client.post(url, {"queue": "email", "operation": "set"}).status_code == 403

    client.logout()
    operator(client, "set_queue_limits")
    assert client.get(url).status_code == 405
    for bad in [{"concurrency": "0"}, {"burst": "3"}, {"rate": "-1"}]:
        response = client.post(url, {"queue": "email", "operation": "set", **bad}, follow=True)
        first = next(str(m) for m in response.context["messages"])
        assert first.startswith("Limits not changed")
    assert not QueueState.objects.filter(queue="email").exists()
