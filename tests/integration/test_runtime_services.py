"""The worker's services that schedule attempts, on the runtime's own psycopg connections
against real PostgreSQL: the `Executor` (what it adds to the attempt lifecycle, which
test_attempt_conformance.py covers), the `Runtime` (start, run jobs, drain on stop), the
`Listener` (NOTIFY → wake-ups and cancel flags) and the `Registrar` (the worker's row).

Transactional tests: the runtime commits on its own connections. Rows are set up and
checked through the ORM outside the event loop, or from the loop on a thread of their own
(`in_thread`), never on the loop itself.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from django.db import connections
from django.utils import timezone

import awa_django
from awa_django.channels import CANCEL_CHANNEL, WAKER_VACANT, channel_for, role_channel_for
from awa_django.conf import AwaSettings, QueueConfig
from awa_django.execution import attempt
from awa_django.execution.context import JobContext
from awa_django.registry import registry
from awa_django.results import RetryAfter
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job, LeaderLease, WorkerInstance
from awa_django.storage.query import Query
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.worker import registrar as registrar_module
from awa_django.worker import runtime as runtime_module
from awa_django.worker.completer import Completer
from awa_django.worker.database import Database
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.executor import Executor
from awa_django.worker.hook_queue import HookQueue
from awa_django.worker.inflight import InFlight
from awa_django.worker.listener import Listener
from awa_django.worker.registrar import Registrar
from awa_django.worker.runtime import EXIT_OK, EXIT_UNCLEAN, Runtime
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

Q = "runtime-svc"
DEADLINE = 10.0  # seconds any condition below may take, far beyond what it needs
T = TypeVar("T")

UNBLOCK = threading.Event()  # lets a `block` handler return


@dataclass
class RuntimeSvc:
    mode: str


def _wait_for_cancel(job: JobContext[RuntimeSvc]) -> None:
    """Work until told to stop (cancel, rescue or shutdown), then complete."""
    deadline = time.monotonic() + DEADLINE
    while not job.is_cancelled() and time.monotonic() < deadline:
        time.sleep(0.01)
    job.result = {"noticed_cancel": job.is_cancelled()}


def _cancel_itself(job: JobContext[RuntimeSvc]) -> None:
    awa_django.Client().cancel(job.id)  # an operator, while the handler runs


MODES: dict[str, Callable[[JobContext[RuntimeSvc]], Any]] = {
    "complete": lambda job: None,
    "retry": lambda job: RetryAfter(60),
    "wait_for_cancel": _wait_for_cancel,
    "block": lambda job: UNBLOCK.wait(DEADLINE),
    "cancel_itself": _cancel_itself,
}


@awa_django.job(RuntimeSvc, queue=Q)
def runtime_svc(job: JobContext[RuntimeSvc]) -> Any:
    return MODES[job.args.mode](job)


@pytest.fixture(autouse=True)
def _unblocked() -> Iterator[None]:
    UNBLOCK.clear()
    yield
    UNBLOCK.set()


def enqueue(mode: str) -> int:
    return awa_django.enqueue(RuntimeSvc(mode)).id


async def until(condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def until_in_thread(condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
    """`until` for a condition that reads the database (ORM code, off the event loop)."""
    deadline = time.monotonic() + timeout
    while not await in_thread(condition):
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def in_thread(call: Callable[[], T]) -> T:
    """ORM code from the event loop: on a thread of its own, its connection closed after."""

    def closing() -> T:
        try:
            return call()
        finally:
            connections.close_all()

    return await asyncio.to_thread(closing)


def run_loop(main: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(main(), 3 * DEADLINE)

    return asyncio.run(bounded())


# -- executor -----------------------------------------------------------------------------
@dataclass
class Worker:
    db: Database
    executor: Executor
    inflight: InFlight
    log: list[str]  # statements run on `db` and the slot releases, in order

    async def claim(self) -> list[JobSnapshot]:
        return await self.db.run(attempt.claim(QueueConfig(Q), 10, "w-exec"))

    async def execute(self, row: JobSnapshot) -> None:
        await self.executor.execute(row, lambda: self.log.append(f"release {row.id}"))


@asynccontextmanager
async def worker() -> AsyncIterator[Worker]:
    """An Executor with its Completer flushing, on a fresh runtime Database."""
    db = Database("default", "awa-runtime-test", max_size=4)
    await db.open()
    log: list[str] = []
    run = db.run

    async def logged(query: Query[T]) -> T:
        log.append(query.statement.name)
        return await run(query)

    db.run = logged  # type: ignore[method-assign]
    threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="awa-runtime-test")
    completer = Completer(db, forced=lambda: False)
    flushing = asyncio.ensure_future(completer.run())
    inflight, hooks = InFlight(), HookQueue()
    executor = Executor(db, completer, inflight, threads, hooks, 1024, forced=lambda: False)
    try:
        yield Worker(db, executor, inflight, log)
    finally:
        flushing.cancel()
        threads.shutdown(wait=True)
        hooks.close()
        await db.close()


@dataclass
class RuntimeSvcAsync:
    n: int


ASYNC_TASKS: list[str] = []  # the task each async attempt ran in


@awa_django.job(RuntimeSvcAsync, queue=Q)
async def runtime_svc_async(job: JobContext[RuntimeSvcAsync]) -> None:
    task = asyncio.current_task()
    assert task is not None
    ASYNC_TASKS.append(task.get_name())


def test_only_attempts_of_declared_async_handlers_start_within_their_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dispatcher starts an attempt inside its claim's turn only when its handler runs
    on the loop; a thread's handler, a kind unknown here and a kind only a resolver knows
    (which would import a module to answer) start a turn later."""

    def resolving(kind: str) -> None:
        raise AssertionError(f"asked the resolvers about {kind}")

    # add_resolver appends to this copy; the registry gets its own list back afterwards.
    monkeypatch.setattr(registry, "_resolvers", list(registry._resolvers))
    registry.add_resolver(resolving)

    async def main() -> dict[str, bool]:
        async with worker() as w:
            (row,) = await w.claim()
            return {
                "sync": w.executor.runs_on_loop(row),
                "async": w.executor.runs_on_loop(replace(row, kind="runtime_svc_async")),
                "unknown": w.executor.runs_on_loop(replace(row, kind="path.to.task")),
            }

    enqueue("complete")
    assert run_loop(main) == {"sync": False, "async": True, "unknown": False}


def test_the_runtime_asks_the_executor_which_attempts_start_within_their_claim() -> None:
    """The runtime's dispatchers start attempts as `Executor.runs_on_loop` says (the
    dispatcher test covers what an eager start does), and a mix of async attempts, started
    eagerly, and a sync one all complete, each async attempt in its own task."""
    rt = runtime(concurrency=4)
    ASYNC_TASKS.clear()

    async def main() -> int:
        running = await started(rt)
        (dispatcher,) = rt.dispatchers
        assert dispatcher.starts_at_once == rt.executor.runs_on_loop
        await in_thread(
            lambda: (
                awa_django.enqueue_many([RuntimeSvcAsync(n) for n in range(3)])
                + awa_django.enqueue_many([RuntimeSvc("complete")])
            )
        )
        await until(lambda: rt.executor.completed_count == 4)
        rt.request_stop()
        return await running

    assert run_loop(main) == EXIT_OK
    assert len(set(ASYNC_TASKS)) == 3
    assert Job.objects.filter(queue=Q, state="completed").count() == 4


@pytest.mark.parametrize(
    ("mode", "written_by"),
    # No hook reads the completion's event: the lean batch statement writes it.
    [("complete", "job_complete_many_lean"), ("retry", "job_set_state_if_running")],
)
def test_executor_releases_the_slot_before_it_writes_the_outcome(
    mode: str, written_by: str
) -> None:
    job_id = enqueue(mode)

    async def main() -> list[str]:
        async with worker() as w:
            (row,) = await w.claim()
            await w.execute(row)
            return w.log

    assert run_loop(main) == ["job_claim_many", f"release {job_id}", written_by]
    assert Job.objects.get(id=job_id).state == ("completed" if mode == "complete" else "retryable")


def test_an_attempt_is_in_flight_while_it_runs_and_sees_its_cancel_flag() -> None:
    job_id = enqueue("wait_for_cancel")

    async def main() -> tuple[list[int], bool, int]:
        async with worker() as w:
            (row,) = await w.claim()
            running = asyncio.ensure_future(w.execute(row))
            await until(lambda: len(w.inflight) == 1)
            in_flight = [job.id for job in w.inflight.snapshot()]
            assert not w.inflight.mark_cancelled(row.id, row.run_lease + 1)  # another attempt
            marked = w.inflight.mark_cancelled(row.id, row.run_lease)
            await running
            return in_flight, marked, len(w.inflight)

    assert run_loop(main) == ([job_id], True, 0)
    job = Job.objects.get(id=job_id)
    assert (job.state, job.result) == ("completed", {"noticed_cancel": True})


def test_executor_counts_only_the_completions_that_applied() -> None:
    done, stale = enqueue("complete"), enqueue("cancel_itself")

    async def main() -> int:
        async with worker() as w:
            for row in await w.claim():
                await w.execute(row)
            return w.executor.completed_count

    assert run_loop(main) == 1
    assert Job.objects.get(id=done).state == "completed"
    assert Job.objects.get(id=stale).state == "cancelled"


# -- runtime ------------------------------------------------------------------------------
def runtime(concurrency: int = 2, grace: float = 5.0, deadline: float = 300.0) -> Runtime:
    # A poll interval far beyond DEADLINE: a job that runs in time was woken by a NOTIFY.
    settings = AwaSettings(
        queues={Q: QueueConfig(Q, concurrency, deadline=deadline)},
        poll_interval=60.0,
        heartbeat_interval=60.0,
        shutdown_grace=grace,
    )
    return Runtime(settings, [settings.queues[Q]], worker_id=f"rt-{uuid.uuid4().hex[:8]}")


async def started(rt: Runtime) -> asyncio.Future[int]:
    """`rt.main()` running, once its listener is connected."""
    main = asyncio.ensure_future(rt.main())
    await until(lambda: hasattr(rt, "listener") and rt.listener.connected.is_set())
    return main


def test_runtime_runs_jobs_and_a_stop_drains_it_to_exit_code_zero() -> None:
    rt = runtime(concurrency=2)

    async def main() -> int:
        running = await started(rt)
        rows = await in_thread(lambda: awa_django.enqueue_many([RuntimeSvc("complete")] * 3))
        await until(lambda: rt.executor.completed_count == 3)
        # Leadership and registration start a second after the dispatchers (decision 031).
        await until(lambda: rt.elector.is_leader)
        registered = WorkerInstance.objects.filter(worker_id=rt.worker_id).exists
        await until_in_thread(registered)
        rt.request_stop()
        assert len(rows) == 3
        return await running

    assert run_loop(main) == EXIT_OK
    jobs = Job.objects.filter(queue=Q)
    assert [(j.state, j.attempted_by) for j in jobs] == [("completed", [rt.worker_id])] * 3
    assert not WorkerInstance.objects.filter(worker_id=rt.worker_id).exists()  # deregistered
    assert not LeaderLease.objects.filter(holder=rt.worker_id).exists()  # released
    assert not ActiveLease.objects.exists()


def test_a_starting_worker_claims_before_it_seeks_leadership_or_registers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 031: the election (with the first maintenance pass) and the registration
    wait SERVICES_DELAY after the dispatchers. Jobs run meanwhile; a worker stopped
    before the delay leaves neither a leader lease nor a worker row behind."""
    monkeypatch.setattr(runtime_module, "SERVICES_DELAY", 3 * DEADLINE)
    rt = runtime(concurrency=2)

    async def main() -> tuple[int, bool, bool]:
        running = await started(rt)
        await in_thread(lambda: awa_django.enqueue_many([RuntimeSvc("complete")] * 3))
        await until(lambda: rt.executor.completed_count == 3)
        leading = await in_thread(LeaderLease.objects.exists)
        registered = await in_thread(WorkerInstance.objects.exists)
        rt.request_stop()
        return await running, leading, registered

    assert run_loop(main) == (EXIT_OK, False, False)
    assert not LeaderLease.objects.exists()
    assert not WorkerInstance.objects.exists()


def test_a_worker_told_to_stop_before_the_delay_neither_leads_nor_registers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its drain may outlast SERVICES_DELAY: the services still never start."""
    monkeypatch.setattr(runtime_module, "SERVICES_DELAY", 0.2)
    enqueue("block")
    rt = runtime()

    async def main() -> tuple[int, bool, bool]:
        running = await started(rt)
        await until(lambda: len(rt.inflight) == 1)
        rt.request_stop()
        # The drain, held by the blocked job, outlasts the delay: wait for the delayed
        # start to have run its course.
        (delayed,) = [
            task
            for task in asyncio.all_tasks()
            if task.get_coro().__qualname__ == "Runtime._start_services_later"  # type: ignore[union-attr]
        ]
        await until(delayed.done)
        leading = await in_thread(LeaderLease.objects.exists)
        registered = await in_thread(WorkerInstance.objects.exists)
        UNBLOCK.set()
        return await running, leading, registered

    assert run_loop(main) == (EXIT_OK, False, False)


def test_a_stop_lets_the_running_attempt_finish_and_tells_it_to_wrap_up() -> None:
    job_id = enqueue("wait_for_cancel")
    rt = runtime()

    async def main() -> int:
        running = await started(rt)
        await until(lambda: len(rt.inflight) == 1)
        rt.request_stop()
        return await running

    assert run_loop(main) == EXIT_OK
    job = Job.objects.get(id=job_id)
    assert (job.state, job.result) == ("completed", {"noticed_cancel": True})


def test_a_stop_whose_grace_runs_out_exits_unclean_and_leaves_the_attempt_to_rescue() -> None:
    job_id = enqueue("block")
    rt = runtime(grace=0.3)

    async def main() -> tuple[int, str, bool]:
        running = await started(rt)
        await until(lambda: len(rt.inflight) == 1)
        rt.request_stop()
        code = await running
        job = await in_thread(lambda: Job.objects.get(id=job_id))
        # No heartbeat came in the grace (interval 60 s): the lease is not written yet, so
        # the stale-heartbeat rescue goes by the claim's attempted_at (decision 030).
        leased = await in_thread(lambda: ActiveLease.objects.filter(job_id=job_id).exists())
        UNBLOCK.set()
        await asyncio.to_thread(rt.threads.shutdown, wait=True)  # the handler's thread ends
        return code, job.state, leased

    assert run_loop(main) == (EXIT_UNCLEAN, "running", False)
    Job.objects.filter(id=job_id).update(attempted_at=timezone.now() - dt.timedelta(hours=1))
    (rescued,) = maintenance_sql.job_rescue_stale_heartbeat(
        limit=10, staleness_seconds=90, message="stale"
    ).run("default")
    assert (rescued.id, rescued.state) == (job_id, "retryable")


def test_the_runtimes_heartbeat_writes_the_lease_with_the_queues_deadline() -> None:
    """Decision 030: with a deadline over two heartbeat intervals (300 s against 60 s) the
    claim writes no lease; the runtime's heartbeat writes it, with the deadline of the
    queue's settings counted from the claim. An int, as a settings file gives it."""
    job_id = enqueue("block")
    rt = runtime(deadline=300)

    async def main() -> tuple[bool, int, ActiveLease, Job, int]:
        running = await started(rt)
        await until(lambda: len(rt.inflight) == 1)
        leased_by_claim = await in_thread(ActiveLease.objects.filter(job_id=job_id).exists)
        owned = await in_thread(rt.heartbeat.run_once)
        lease = await in_thread(lambda: ActiveLease.objects.get(job_id=job_id))
        job = await in_thread(lambda: Job.objects.get(id=job_id))
        UNBLOCK.set()
        rt.request_stop()
        return leased_by_claim, owned, lease, job, await running

    leased_by_claim, owned, lease, job, code = run_loop(main)
    assert (leased_by_claim, owned, code) == (False, 1, EXIT_OK)
    assert job.attempted_at is not None
    assert (lease.worker_id, lease.claimed_at) == (rt.worker_id, job.attempted_at)
    assert lease.deadline_at == job.attempted_at + dt.timedelta(seconds=300)


# -- listener -----------------------------------------------------------------------------
class CountingDispatcher(Dispatcher):
    def __init__(self, queue: str, db: Database) -> None:
        super().__init__(QueueConfig(queue), db, _never_executes, "w-listen", 60.0)
        self.woken = 0

    def wake(self) -> None:
        self.woken += 1
        super().wake()


async def _never_executes(row: JobSnapshot, release: Callable[[], None]) -> None:
    raise AssertionError("a listener test claims nothing")


def listener(*queues: str) -> tuple[Listener, list[CountingDispatcher], InFlight]:
    db = Database("default", "awa-runtime-test-listen", max_size=2)
    dispatchers = [CountingDispatcher(queue, db) for queue in queues]
    inflight = InFlight()
    return Listener(db, list(dispatchers), inflight), dispatchers, inflight


def in_flight(*jobs: Job) -> list[JobContext[object]]:
    """Attempt contexts for running `jobs`, as the executor would hold them."""
    return [JobContext(JobSnapshot.from_mapping(_values(job.id)), None) for job in jobs]


def _values(job_id: int) -> Mapping[str, Any]:
    return Job.objects.filter(id=job_id).values().get()


def test_listener_wakes_the_dispatcher_of_the_notified_queue_only() -> None:
    long_name = "q" * 80  # its channel is hashed to fit PostgreSQL's 63 bytes
    lst, (email, other, long), _ = listener("email", "other", long_name)
    # Not connected, so no role is held here: an enqueue's hint wakes nobody (the holder
    # elsewhere claims), a vacancy wakes every process (test_waker_role.py).
    lst.handle(channel_for("email"), "")
    lst.handle(role_channel_for(long_name), WAKER_VACANT)
    lst.handle(role_channel_for("email"), WAKER_VACANT)
    lst.handle("awa_role:nobody", WAKER_VACANT)
    assert (email.woken, other.woken, long.woken) == (1, 0, 1)


def test_listener_sets_the_cancel_flag_of_exactly_the_named_attempt() -> None:
    lst, (dispatcher,), inflight = listener(Q)
    first, second = JobFactory.create_batch(2, queue=Q, state="running", run_lease=3)
    target, bystander = in_flight(first, second)
    inflight.add(target)
    inflight.add(bystander)
    lst.handle(CANCEL_CHANNEL, json.dumps({"job_id": first.id, "run_lease": 2}))  # older
    assert not target.is_cancelled()
    lst.handle(CANCEL_CHANNEL, json.dumps({"job_id": first.id, "run_lease": 3}))
    assert target.is_cancelled() and not bystander.is_cancelled()
    assert dispatcher.woken == 0


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "not json",
        "null",
        "[1, 2]",
        '"7"',
        "{}",
        '{"job_id": 1}',
        '{"job_id": "x", "run_lease": 1}',
    ],
)
def test_listener_ignores_a_malformed_cancel_payload_with_a_warning(
    payload: str, caplog: pytest.LogCaptureFixture
) -> None:
    lst, _, inflight = listener(Q)
    (job,) = in_flight(JobFactory(queue=Q, state="running", run_lease=1))
    inflight.add(job)
    with caplog.at_level(logging.WARNING, logger="awa_django.worker"):
        lst.handle(CANCEL_CHANNEL, payload)
    assert not job.is_cancelled()
    assert [r.getMessage() for r in caplog.records] == [
        f"ignoring malformed {CANCEL_CHANNEL} payload {payload!r}"
    ]


def test_a_running_listener_hears_enqueue_and_cancel_notifications() -> None:
    lst, (dispatcher,), inflight = listener(Q)
    running_job = JobFactory(queue=Q, state="running", run_lease=1)
    (attempt_of_running_job,) = in_flight(running_job)
    inflight.add(attempt_of_running_job)

    async def main() -> tuple[int, int]:
        listening = asyncio.ensure_future(lst.run())
        try:
            await until(lst.connected.is_set)
            assert await dispatcher.role.take()  # the only process: it holds the role
            on_connect = dispatcher.woken  # every (re)connect wakes each dispatcher once
            await in_thread(lambda: enqueue("complete"))
            await until(lambda: dispatcher.woken == on_connect + 1)
            await in_thread(lambda: awa_django.Client().cancel(running_job.id))
            await until(attempt_of_running_job.is_cancelled)
            return on_connect, dispatcher.woken
        finally:
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)
            await lst.db.close()

    assert run_loop(main) == (1, 2)  # the cancel wakes no dispatcher


# -- registrar ----------------------------------------------------------------------------
def test_registrar_upserts_the_worker_row_and_deregister_removes_it() -> None:
    state = {"leader": False, "completed": 0}

    async def main() -> list[Mapping[str, Any]]:
        db = Database("default", "awa-runtime-test", max_size=1)
        await db.open()
        registrar = Registrar(
            db,
            "reg-1",
            {Q: 3, "email": 1},
            is_leader=lambda: bool(state["leader"]),
            completed=lambda: int(state["completed"]),
            log_interval=60,
            hooks_dropped=lambda: int(state["completed"]) // 7 * 3,
        )
        rows: list[Mapping[str, Any]] = []
        try:
            await registrar.run_once()
            rows.append(await in_thread(WorkerInstance.objects.values().get))
            state.update(leader=True, completed=7)
            registrar.shutting_down = True
            await registrar.run_once()
            rows.append(await in_thread(WorkerInstance.objects.values().get))
            await registrar.deregister()
            await registrar.deregister()  # nothing left to remove: no error
            return rows
        finally:
            await db.close()

    first, second = run_loop(main)
    assert first == {
        "worker_id": "reg-1",
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "queues": {Q: 3, "email": 1},
        "leader": False,
        "shutting_down": False,
        "completed_count": 0,
        "started_at": first["started_at"],
        "last_seen_at": first["started_at"],
        # What "no live worker handles kind X" is computed from (decision 011).
        "kinds": sorted(definition.kind for definition in registry.jobs()),
        "serves_tasks": registry.resolves_on_demand,
        "hooks_dropped": 0,
    }
    assert (second["leader"], second["shutting_down"], second["completed_count"]) == (
        True,
        True,
        7,
    )
    assert second["hooks_dropped"] == 3
    assert second["started_at"] == first["started_at"]
    assert second["last_seen_at"] > first["last_seen_at"]
    assert not WorkerInstance.objects.exists()


def test_registrar_logs_the_throughput_once_per_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = {"now": 1000.0}
    monkeypatch.setattr(registrar_module, "time", SimpleNamespace(monotonic=lambda: clock["now"]))
    completed = {"count": 0}
    registrar = Registrar(
        Database("default", "awa-runtime-test", max_size=1),
        "reg-log",
        {Q: 1},
        is_leader=lambda: False,
        completed=lambda: completed["count"],
        log_interval=60,
    )

    def tick(seconds: float, count: int) -> None:
        clock["now"] += seconds
        completed["count"] = count
        registrar.log_throughput()

    with caplog.at_level(logging.INFO, logger="awa_django.worker"):
        tick(30, 50)  # inside the first interval: nothing
        tick(30, 120)  # 60 s since start: 120 jobs
        tick(59, 150)  # inside the next interval: nothing
        tick(1, 150)  # 60 s later: 30 more
    assert [r.getMessage() for r in caplog.records] == [
        "worker reg-log: 120 jobs completed in the last 60s (2.0/s)",
        "worker reg-log: 30 jobs completed in the last 60s (0.5/s)",
    ]
