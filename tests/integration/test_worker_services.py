"""The worker's services driven one step at a time through `run_once()` (STYLE §6), on the
runtime's own psycopg connections (`worker.database.Database`) against real PostgreSQL:
dispatcher, completer, heartbeat, and the leader's promoter, rescuer, pruner and election.

Transactional tests: the runtime commits on its own connections, and its clock is the
database's real `now()`. Rows are set up and checked through the ORM outside the loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from django.db import connection
from django.utils import timezone

from awa_django.conf import QueueConfig
from awa_django.events import Completed, Event, Exhausted, Rescued
from awa_django.exceptions import OutcomeNotStored
from awa_django.execution.context import JobContext
from awa_django.registry import HookRegistration, registry
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, Job, LeaderLease, WorkerInstance
from awa_django.storage.query import Query
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.completer import Completer
from awa_django.worker.database import Database
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.heartbeat import Heartbeat
from awa_django.worker.inflight import InFlight
from awa_django.worker.maintenance import pruner
from awa_django.worker.maintenance.leader import LeaderElector
from awa_django.worker.maintenance.loop import MaintenanceLoop
from awa_django.worker.maintenance.promoter import Promoter
from awa_django.worker.maintenance.pruner import Pruner
from awa_django.worker.maintenance.rescuer import Rescuer
from tests.factories import JobFactory as BaseJobFactory
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

Q = "core-svc"
AGO = dt.timedelta(hours=1)
T = TypeVar("T")


class JobFactory(BaseJobFactory):
    kind = "core_svc"
    queue = Q


def count_statements(db: Database) -> list[str]:
    """Record the name of every statement `db` runs from now on."""
    seen: list[str] = []

    run = db.run

    async def counted(query: Query[T]) -> T:
        seen.append(query.statement.name)
        return await run(query)

    db.run = counted  # type: ignore[method-assign]
    return seen


def claim(limit: int = 10, deadline: float = 0.0) -> list[JobSnapshot]:
    """Claim on Django's connection (autocommit here), as another worker would."""
    query = jobs_sql.job_claim_many(
        lease_now=True, queue=Q, limit=limit, worker_id="w-test", deadline_seconds=deadline
    )
    return query.run("default")


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


# -- dispatcher ---------------------------------------------------------------------------
def test_dispatcher_claims_no_more_than_its_free_slots() -> None:
    JobFactory.create_batch(5)

    async def step(db: Database) -> tuple[list[int], list[str]]:
        gates: dict[int, asyncio.Event] = {}

        async def execute(row: JobSnapshot, release: Callable[[], None]) -> None:
            gates[row.id] = asyncio.Event()
            await gates[row.id].wait()
            release()

        dispatcher = Dispatcher(QueueConfig(Q, concurrency=3), db, execute, "w-disp", 0.2)
        statements = count_statements(db)
        claimed = [await dispatcher.run_once()]
        assert dispatcher.running == 3 and dispatcher.free_slots == 0
        claimed.append(await dispatcher.run_once())  # full: no statement at all
        await until(lambda: len(gates) == 3)
        next(iter(gates.values())).set()  # one attempt finishes, freeing one slot
        await until(lambda: dispatcher.free_slots == 1)
        claimed.append(await dispatcher.run_once())
        await until(lambda: len(gates) == 4)
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*dispatcher.tasks)
        claimed.append(await dispatcher.run_once())
        await dispatcher.stop()
        claimed.append(await dispatcher.run_once())  # stopping: claims nothing
        return claimed, statements

    claimed, statements = with_db(step)
    assert claimed == [3, 0, 1, 1, 0]
    assert statements == ["job_claim_many"] * 3  # one statement per run_once with free slots
    assert Job.objects.filter(state="running").count() == 5
    assert set(ActiveLease.objects.values_list("worker_id", flat=True)) == {"w-disp"}


@pytest.mark.parametrize("at_once", [True, False])
def test_dispatcher_starts_each_attempt_within_its_claim(at_once: bool) -> None:
    """An attempt the runtime says runs on the loop starts in the claim's own turn: a short
    handler has run and freed its slot by the time run_once returns, so the next claim can
    go out at once; the tasks still in flight are the runtime's to wait for, the finished
    ones are not kept. Any other attempt starts a turn later."""
    JobFactory.create_batch(3)

    async def step(db: Database) -> tuple[int, list[int], int, int]:
        started: list[int] = []
        gate = asyncio.Event()

        async def execute(row: JobSnapshot, release: Callable[[], None]) -> None:
            started.append(row.id)
            if len(started) > 1:
                release()
                return  # finished without ever waiting
            await gate.wait()
            release()

        dispatcher = Dispatcher(
            QueueConfig(Q, concurrency=3),
            db,
            execute,
            "w-eager",
            0.2,
            starts_at_once=lambda row: at_once,
        )
        claimed = await dispatcher.run_once()
        seen = list(started)
        free, kept = dispatcher.free_slots, len(dispatcher.tasks)
        gate.set()
        await asyncio.gather(*dispatcher.tasks)
        return claimed, seen, free, kept

    claimed, started, free, kept = with_db(step)
    assert claimed == 3
    if at_once:
        assert len(started) == 3  # every handler began before run_once returned
        assert free == 2  # the two that finished gave their slots back in the same turn
        assert kept == 1  # only the one still waiting is tracked
    else:
        assert (len(started), free, kept) == (0, 0, 3)


def test_dispatcher_applies_the_queue_deadline_to_the_lease() -> None:
    JobFactory()

    async def step(db: Database) -> None:
        async def execute(row: JobSnapshot, release: Callable[[], None]) -> None:
            release()

        dispatcher = Dispatcher(QueueConfig(Q, concurrency=1, deadline=42), db, execute, "w", 1)
        assert await dispatcher.run_once() == 1
        await asyncio.gather(*dispatcher.tasks)

    with_db(step)
    lease = ActiveLease.objects.get()
    assert lease.deadline_at is not None
    assert lease.deadline_at - lease.claimed_at == dt.timedelta(seconds=42)


def test_concurrent_dispatchers_never_claim_the_same_job() -> None:
    JobFactory.create_batch(30)

    async def main() -> list[list[int]]:
        claimed: list[list[int]] = [[], []]
        databases = [Database("default", f"awa-core-test-{i}", max_size=2) for i in (0, 1)]
        for db in databases:
            await db.open()
        try:
            dispatchers = []
            for index, db in enumerate(databases):

                async def execute(
                    row: JobSnapshot, release: Callable[[], None], i: int = index
                ) -> None:
                    claimed[i].append(row.id)
                    release()

                dispatchers.append(Dispatcher(QueueConfig(Q, 20), db, execute, f"w{index}", 1))
            for _ in range(3):
                await asyncio.gather(*(d.run_once() for d in dispatchers))
            await asyncio.gather(*(t for d in dispatchers for t in d.tasks))
        finally:
            for db in databases:
                await db.close()
        return claimed

    first, second = asyncio.run(main())
    assert not set(first) & set(second)
    assert len(first) + len(second) == 30
    assert set(Job.objects.values_list("attempt", flat=True)) == {1}


# -- completer ----------------------------------------------------------------------------
def test_completer_batches_completions_into_one_statement_and_reports_stale_ones() -> None:
    JobFactory.create_batch(4)
    a, b, c, d = claim()
    stale_d = JobSnapshot.from_mapping(
        {**Job.objects.filter(id=d.id).values().get(), "run_lease": 0}
    )

    async def step(db: Database) -> tuple[list[JobSnapshot | None], list[str], int]:
        completer = Completer(db, forced=lambda: False)
        statements = count_statements(db)
        waiting = [
            asyncio.ensure_future(completer.complete(a, '{"total": 3}')),
            asyncio.ensure_future(completer.complete(b, None)),
            asyncio.ensure_future(completer.complete(c, '"a plain string"')),
            asyncio.ensure_future(completer.complete(stale_d, None)),
        ]
        await until(lambda: completer.pending() == 4)
        applied = await completer.run_once()
        return list(await asyncio.gather(*waiting)), statements, applied

    results, statements, applied = with_db(step)
    # No hook reads their Completed events: only the finalization times come back.
    assert statements == ["job_complete_many_lean"] and applied == 3
    done_a, done_b, done_c, stale = results
    assert stale is None
    assert done_a is not None and (done_a.state, done_a.result) == ("completed", {"total": 3})
    assert done_b is not None and done_b.result is None
    assert done_c is not None and done_c.result == "a plain string"
    assert Job.objects.get(id=c.id).result == "a plain string"
    assert Job.objects.get(id=d.id).state == "running"
    assert list(ActiveLease.objects.values_list("job_id", flat=True)) == [d.id]


@pytest.mark.parametrize("hooked", [False, True])
def test_the_completer_answers_the_committed_row_with_or_without_a_hook_to_read_it(
    hooked: bool,
) -> None:
    """A batch with a kind whose Completed events a hook reads returns the whole rows; a
    batch without builds them from the claimed rows. Either way the answer is the row the
    database holds (handlers here change nothing in place)."""
    JobFactory.create_batch(3, metadata={"trace": "t-1"}, tags=["a"])
    claimed = claim()
    results = ['{"total": 3}', None, '"done"']
    hook = HookRegistration("core_svc", lambda event: None, frozenset({Completed}), None)
    if hooked:
        registry.add_hook(hook)

    async def step(db: Database) -> tuple[list[JobSnapshot | None], list[str]]:
        completer = Completer(db, forced=lambda: False)
        statements = count_statements(db)
        waiting = [
            asyncio.ensure_future(completer.complete(row, result))
            for row, result in zip(claimed, results, strict=True)
        ]
        await until(lambda: completer.pending() == 3)
        await completer.run_once()
        return list(await asyncio.gather(*waiting)), statements

    try:
        answered, statements = with_db(step)
    finally:
        registry.remove_hook(hook)
    assert statements == ["job_complete_many" if hooked else "job_complete_many_lean"]
    for row in answered:
        assert row is not None
        assert row == jobs_sql.job_get(id=row.id).run("default")
        assert (row.state, row.metadata, row.tags) == ("completed", {"trace": "t-1"}, ["a"])


def test_a_refused_completion_fails_only_its_own_attempt() -> None:
    JobFactory.create_batch(4)
    a, poison, c, d = claim()

    async def step(db: Database) -> tuple[list[object], list[str]]:
        completer = Completer(db, forced=lambda: False)
        statements = count_statements(db)
        # Valid JSON the database cannot store (a lone surrogate escape) in one row.
        results = {poison.id: '"\\ud800"', a.id: '{"n": 1}', c.id: None, d.id: "2"}
        waiting = [
            asyncio.ensure_future(completer.complete(row, results[row.id]))
            for row in (a, poison, c, d)
        ]
        await until(lambda: completer.pending() == 4)
        await completer.run_once()
        settled = await asyncio.gather(*waiting, return_exceptions=True)
        return list(settled), statements

    (done_a, refused, done_c, done_d), statements = with_db(step)
    # The batch, then each row alone: the neighbours complete once, on their first attempt.
    assert statements == ["job_complete_many_lean"] * 5
    assert isinstance(refused, OutcomeNotStored) and "Unicode" in str(refused)
    for done in (done_a, done_c, done_d):
        assert isinstance(done, JobSnapshot) and (done.state, done.attempt) == ("completed", 1)
    assert Job.objects.get(id=poison.id).state == "running"  # its attempt decides what next
    assert list(ActiveLease.objects.values_list("job_id", flat=True)) == [poison.id]


def test_a_dispatcher_held_back_claims_nothing_until_allowed() -> None:
    JobFactory.create_batch(2)
    allowed = False

    async def step(db: Database) -> tuple[list[int], list[str]]:
        async def execute(row: JobSnapshot, release: Callable[[], None]) -> None:
            release()

        dispatcher = Dispatcher(
            QueueConfig(Q, concurrency=5), db, execute, "w-held", 0.2, may_claim=lambda: allowed
        )
        statements = count_statements(db)
        claimed = [await dispatcher.run_once()]  # held back (a full hook backlog): no query
        nonlocal allowed
        allowed = True
        claimed.append(await dispatcher.run_once())
        await asyncio.gather(*dispatcher.tasks)
        return claimed, statements

    claimed, statements = with_db(step)
    assert claimed == [0, 2] and statements == ["job_claim_many"]


def test_completer_run_once_with_nothing_pending_runs_no_statement() -> None:
    async def step(db: Database) -> tuple[int, list[str]]:
        statements = count_statements(db)
        return await Completer(db, forced=lambda: False).run_once(), statements

    assert with_db(step) == (0, [])


# -- heartbeat ----------------------------------------------------------------------------
def test_heartbeat_refreshes_owned_leases_and_flags_lost_ones() -> None:
    JobFactory.create_batch(2)
    kept, lost = claim()
    ActiveLease.objects.update(heartbeat_at=timezone.now() - AGO)
    # Rescued meanwhile: the job no longer runs under this attempt, lease gone.
    Job.objects.filter(id=lost.id).update(state="retryable")
    ActiveLease.objects.filter(job_id=lost.id).delete()
    inflight = InFlight()
    kept_job: JobContext[object] = JobContext(kept, None)
    lost_job: JobContext[object] = JobContext(lost, None)
    inflight.add(kept_job)
    inflight.add(lost_job)
    kept_job.set_progress(40, "working")

    db = Database("default", "awa-core-test", max_size=1)
    heartbeat = Heartbeat(db, inflight, interval=60)
    heartbeat.start()
    try:
        before = timezone.now()
        assert heartbeat.run_once() == 1
    finally:
        heartbeat.stop()
    assert ActiveLease.objects.get(job_id=kept.id).heartbeat_at >= before - dt.timedelta(seconds=1)
    assert lost_job.is_cancelled() and not kept_job.is_cancelled()
    assert not ActiveLease.objects.filter(job_id=lost.id).exists()  # not written back
    assert Job.objects.get(id=kept.id).progress == {"percent": 40.0, "message": "working"}
    assert heartbeat.beats == 1


def test_heartbeat_with_nothing_in_flight_touches_nothing() -> None:
    heartbeat = Heartbeat(Database("default", "awa-core-test", max_size=1), InFlight(), 60)
    assert heartbeat.run_once() == 0
    assert heartbeat._conn is None  # no connection opened for an idle beat


# -- promoter -----------------------------------------------------------------------------
def test_promoter_makes_due_deferred_jobs_available() -> None:
    past = timezone.now() - AGO
    due = [JobFactory(state="scheduled", run_at=past), JobFactory(state="retryable", run_at=past)]
    future = JobFactory(state="scheduled", run_at=timezone.now() + AGO)

    async def step(db: Database) -> int:
        return await Promoter(db).run_once()

    assert with_db(step) == 2
    assert {j.state for j in Job.objects.filter(id__in=[j.id for j in due])} == {"available"}
    assert Job.objects.get(id=future.id).state == "scheduled"


# -- rescuer ------------------------------------------------------------------------------
def parked(attempt: int, max_attempts: int) -> Job:
    return JobFactory(
        state="waiting_external",
        attempt=attempt,
        max_attempts=max_attempts,
        run_lease=attempt,
        callback_id=uuid.uuid4(),
        callback_timeout_at=timezone.now() - AGO,
    )


def test_rescuer_rescues_stale_heartbeats_deadlines_and_expired_callbacks() -> None:
    JobFactory.create_batch(3)
    stale, late, healthy = claim(deadline=300)
    ActiveLease.objects.filter(job_id=stale.id).update(heartbeat_at=timezone.now() - AGO)
    ActiveLease.objects.filter(job_id=late.id).update(deadline_at=timezone.now() - AGO)
    expired = parked(attempt=1, max_attempts=3)
    exhausted = parked(attempt=3, max_attempts=3)
    emitted: list[Event] = []

    async def step(db: Database) -> list[tuple[str, JobSnapshot]]:
        return await Rescuer(db, staleness=90, emit=emitted.append).run_once()

    rescued = with_db(step)
    assert sorted((reason, row.id) for reason, row in rescued) == sorted(
        [
            ("stale_heartbeat", stale.id),
            ("deadline_exceeded", late.id),
            ("expired_callback", expired.id),
            ("expired_callback", exhausted.id),
        ]
    )
    # One event per rescue (decision 035): Rescued for the jobs that retry, Exhausted with
    # the rescue's reason for the one whose last attempt expired.
    assert all(isinstance(e, Rescued | Exhausted) for e in emitted)
    reasons = [(type(e).__name__, getattr(e, "reason", None), e.job.id) for e in emitted]
    assert sorted(reasons) == sorted(
        [
            ("Rescued", "stale_heartbeat", stale.id),
            ("Rescued", "deadline_exceeded", late.id),
            ("Rescued", "expired_callback", expired.id),
            ("Exhausted", "expired_callback", exhausted.id),
        ]
    )
    (ended,) = [e for e in emitted if isinstance(e, Exhausted)]
    assert (ended.error, ended.attempt, ended.dead_lettered) == ("callback timed out", 3, False)

    def errors_of(job_id: int) -> tuple[str, list[dict[str, Any]]]:
        job = Job.objects.get(id=job_id)
        return job.state, [{k: e[k] for k in e if k != "at"} for e in job.errors]

    assert errors_of(stale.id) == (
        "retryable",
        [{"error": "heartbeat stale: worker presumed dead", "attempt": 1}],
    )
    assert errors_of(late.id) == ("retryable", [{"error": "hard deadline exceeded", "attempt": 1}])
    assert errors_of(expired.id) == ("retryable", [{"error": "callback timed out", "attempt": 1}])
    assert errors_of(exhausted.id) == (
        "failed",
        [{"error": "callback timed out", "attempt": 3, "terminal": True}],
    )
    for job in Job.objects.filter(id__in=[stale.id, late.id, expired.id]):
        assert job.finalized_at is not None
        assert 2.0 <= (job.run_at - job.finalized_at).total_seconds() < 2.5
    assert Job.objects.get(id=healthy.id).state == "running"
    assert list(ActiveLease.objects.values_list("job_id", flat=True)) == [healthy.id]


def test_rescued_attempt_can_no_longer_complete() -> None:
    JobFactory()
    (row,) = claim()
    ActiveLease.objects.update(heartbeat_at=timezone.now() - AGO)

    async def step(db: Database) -> JobSnapshot | None:
        await Rescuer(db, staleness=90, emit=lambda event: None).run_once()
        completer = Completer(db, forced=lambda: False)
        waiting = asyncio.ensure_future(completer.complete(row, None))
        await until(lambda: completer.pending() == 1)
        await completer.run_once()
        return await waiting

    assert with_db(step) is None
    assert Job.objects.get(id=row.id).state == "retryable"


# -- pruner -------------------------------------------------------------------------------
def test_pruner_deletes_terminal_jobs_past_their_retention() -> None:
    now = timezone.now()
    JobFactory(state="completed", finalized_at=now - dt.timedelta(hours=2))
    young_completed = JobFactory(state="completed", finalized_at=now - dt.timedelta(minutes=5))
    JobFactory(state="failed", finalized_at=now - dt.timedelta(hours=3))
    JobFactory(state="cancelled", finalized_at=now - dt.timedelta(hours=3))
    young_failed = JobFactory(state="failed", finalized_at=now - dt.timedelta(hours=1, minutes=30))
    waiting = JobFactory(state="retryable", finalized_at=now - dt.timedelta(days=30))
    WorkerInstance.objects.create(
        worker_id="gone", hostname="h", pid=1, last_seen_at=now - dt.timedelta(days=1)
    )
    WorkerInstance.objects.create(worker_id="alive", hostname="h", pid=2)

    async def step(db: Database) -> int:
        return await Pruner(db, completed_retention=3600, failed_retention=2 * 3600).prune_all()

    assert with_db(step) == 3
    assert set(Job.objects.values_list("id", flat=True)) == {
        young_completed.id,
        young_failed.id,
        waiting.id,
    }
    assert list(WorkerInstance.objects.values_list("worker_id", flat=True)) == ["alive"]


def test_pruner_works_off_a_backlog_of_any_size_in_one_pass() -> None:
    """A queue finishing 1,000 jobs a second must be pruned that fast: one pass deletes
    batch after batch until the backlog is gone (it used to stop after 10 batches a minute)."""
    backlog = 12 * pruner.BATCH + 500
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt,
                   max_attempts, run_at, created_at, finalized_at, run_lease, errors,
                   metadata, tags, attempted_by)
               SELECT 'core_svc', %s, '{}', 'completed', 2, 1, 25, now(), now(),
                      now() - interval '2 hours', 1, '[]', '{}', '{}', '{}'
               FROM generate_series(1, %s)""",
            [Q, backlog],
        )
    young = JobFactory(state="completed", finalized_at=timezone.now())

    async def step(db: Database) -> int:
        leader = Pruner(db, completed_retention=3600, failed_retention=3600, busy_fraction=1.0)
        await leader.run_once()
        assert leader.task is not None
        return await leader.task

    assert with_db(step) == backlog
    assert list(Job.objects.values_list("id", flat=True)) == [young.id]


# -- leader election ----------------------------------------------------------------------
def test_exactly_one_elector_leads_and_the_other_takes_over_after_expiry() -> None:
    async def step(db: Database) -> None:
        first = LeaderElector(db, "core-a", ttl=0.5)
        second = LeaderElector(db, "core-b", ttl=0.5)
        assert await first.run_once() is True
        assert await second.run_once() is False
        assert first.still_valid() and not second.still_valid()
        assert await first.run_once() is True  # renewal keeps it
        # The leader stops renewing (paused, partitioned): after the TTL the other leads.
        await until(lambda: not first.still_valid(), timeout=2)
        deadline = time.monotonic() + 5
        while not await second.run_once():
            assert time.monotonic() < deadline, "no takeover after the lease expired"
            await asyncio.sleep(0.05)
        assert await first.run_once() is False
        assert not first.is_leader and second.still_valid()

    with_db(step)
    assert LeaderLease.objects.get().holder == "core-b"


def test_release_hands_leadership_over_at_once() -> None:
    async def step(db: Database) -> None:
        first = LeaderElector(db, "core-a", ttl=30)
        second = LeaderElector(db, "core-b", ttl=30)
        assert await first.run_once()
        assert not await second.run_once()
        await first.release()
        assert not first.is_leader
        assert await second.run_once()  # no waiting for the 30 s TTL

    with_db(step)


def test_maintenance_loop_runs_services_only_while_leading() -> None:
    async def step(db: Database) -> tuple[int, int]:
        runs = {"a": 0, "b": 0}

        async def service_a() -> None:
            runs["a"] += 1

        async def service_b() -> None:
            runs["b"] += 1

        leader = MaintenanceLoop(LeaderElector(db, "core-a", ttl=30), 10, [(0.0, service_a)])
        follower = MaintenanceLoop(LeaderElector(db, "core-b", ttl=30), 10, [(0.0, service_b)])
        for _ in range(3):
            await leader.run_once()
            await follower.run_once()
        return runs["a"], runs["b"]

    assert with_db(step) == (3, 0)


def test_maintenance_loop_runs_every_service_at_once_on_taking_the_lead_again() -> None:
    """The cron sync (every 60 s) publishes a new leader's schedules at once, not a period
    after it regained the lead."""

    async def step(db: Database) -> list[int]:
        runs = [0]

        async def hourly() -> None:
            runs[0] += 1

        elector = LeaderElector(db, "core-regain", ttl=30)
        loop = MaintenanceLoop(elector, 0.0, [(3600.0, hourly)])
        counts = []
        await loop.run_once()  # leads: runs
        await loop.run_once()  # an hour not passed: does not
        counts.append(runs[0])
        await elector.release()  # lost the lead...
        loop._next_election = 0.0
        await loop.run_once()  # ...and took it again: runs at once
        counts.append(runs[0])
        await elector.release()
        return counts

    assert with_db(step) == [1, 2]
