"""Cron schedules end to end on real PostgreSQL (decision 013, docs/cron.md): the leader's
sync, the compare-and-swap fire (two leaders at once), missed-fire policies, DST days,
pause/resume/trigger/remove through the Client, and cron jobs reaching hooks.

Transactional tests: the scheduler runs on the runtime's own connections, which commit,
and its clock is the database's `now()`. Schedules are set up through the sync (or the
ORM) and moved into the past explicitly where a test needs missed fires.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import random
from collections.abc import Iterator
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

import awa_django
from awa_django import Client, Completed, InvalidSchedule, ScheduleNotFound
from awa_django.keys import KEY_METADATA
from awa_django.registry import registry
from awa_django.registry.schedules import ScheduleDefinition
from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import CronSchedule, Job
from awa_django.storage.sql import cron as cron_sql
from awa_django.testing import capture_events, drain
from awa_django.worker.database import Database, connection_kwargs
from awa_django.worker.maintenance.cron import CronScheduler
from testproject.testjobs.jobs import AccKeyed, AccNoop
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")
BERLIN = ZoneInfo("Europe/Berlin")
Q = "cron-q"


@pytest.fixture
def declared() -> Iterator[list[ScheduleDefinition]]:
    """Schedules a test declares with `periodic`; forgotten afterwards."""
    before = {d.name for d in registry.schedules()}
    made: list[ScheduleDefinition] = []
    yield made
    for definition in registry.schedules():
        if definition.name not in before:
            registry.remove_schedule_declaration(definition.name)


def periodic(
    declared: list[ScheduleDefinition], name: str, expression: str, **options: Any
) -> ScheduleDefinition:
    options.setdefault("queue", Q)
    definition = awa_django.periodic(name, expression, {"n": 1}, kind="cron_test", **options)
    declared.append(definition)
    return definition


def sync(declared: list[ScheduleDefinition]) -> list[str]:
    return with_db(lambda db: CronScheduler(db, lambda: list(declared)).sync())


def evaluate() -> list[JobSnapshot]:
    return with_db(lambda db: CronScheduler(db, list).run_once())


def set_row(name: str, **fields: Any) -> None:
    CronSchedule.objects.filter(name=name).update(**fields)


def db_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def fire_times(jobs: list[JobSnapshot]) -> list[dt.datetime]:
    return [dt.datetime.fromisoformat(j.metadata["cron_fire_time"]) for j in jobs]


def minute(moment: dt.datetime) -> dt.datetime:
    return moment.replace(second=0, microsecond=0)


# -- sync ---------------------------------------------------------------------------------
def test_sync_inserts_declared_schedules_with_the_job_declarations_options(
    declared: list[ScheduleDefinition],
) -> None:
    awa_django.periodic("acc-nightly", "0 2 * * *", AccNoop(n=3), timezone="Europe/Berlin")
    declared.append(registry.schedules()[0])
    periodic(declared, "cron-six", "*/10 * * * * *", priority=1, max_attempts=3, tags=["t"])

    assert sync(declared) == ["acc-nightly", "cron-six"]
    nightly = CronSchedule.objects.get(name="acc-nightly")
    # Queue, priority and max_attempts of @job(AccNoop, queue="acc"), args as stored JSON.
    assert (nightly.kind, nightly.args, nightly.queue) == ("acc_noop", {"n": 3}, "acc")
    assert (nightly.timezone, nightly.missed_fire_policy) == ("Europe/Berlin", "coalesce")
    assert nightly.last_fire_at is None and not nightly.paused
    six = CronSchedule.objects.get(name="cron-six")
    assert (six.priority, six.max_attempts, six.tags, six.queue) == (1, 3, ["t"], Q)


def test_fires_of_a_keyed_kind_carry_their_concurrency_key(
    declared: list[ScheduleDefinition],
) -> None:
    """A schedule of a kind with `@job(concurrency_key=...)` stores the key in its jobs'
    metadata at sync, so each fire is admitted like an enqueue (decision 045)."""
    awa_django.periodic("acc-keyed", "0 2 * * *", AccKeyed("acme"))
    declared.append(next(d for d in registry.schedules() if d.name == "acc-keyed"))
    sync(declared)
    metadata = CronSchedule.objects.get(name="acc-keyed").metadata
    assert metadata[KEY_METADATA] == {"key": "acme", "max": 2}
    fired = [Client().trigger_schedule("acc-keyed").id for _ in range(3)]
    states = [Job.objects.get(id=i).state for i in fired]
    assert states == ["available", "available", "waiting_slot"]


def test_sync_updates_the_definition_but_never_paused_nor_last_fire_at(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-upd", "0 2 * * *")
    sync(declared)
    fired = timezone.now() - dt.timedelta(hours=1)
    set_row("cron-upd", paused=True, last_fire_at=fired)
    declared.clear()
    registry.remove_schedule_declaration("cron-upd")
    periodic(declared, "cron-upd", "0 3 * * *", missed_fire_policy="catch_up")

    assert sync(declared) == ["cron-upd"]
    row = CronSchedule.objects.get(name="cron-upd")
    assert (row.expression, row.missed_fire_policy) == ("0 3 * * *", "catch_up")
    assert row.paused and row.last_fire_at == fired


def test_sync_of_unchanged_declarations_writes_nothing(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-same", "0 2 * * *")
    sync(declared)
    before = CronSchedule.objects.get().updated_at
    assert sync(declared) == []
    assert CronSchedule.objects.get().updated_at == before


def test_sync_never_deletes_schedules_another_deployment_declared(
    declared: list[ScheduleDefinition],
) -> None:
    CronSchedule.objects.create(name="theirs", expression="0 4 * * *", kind="x", queue=Q)
    periodic(declared, "ours", "0 2 * * *")
    sync(declared)
    assert sorted(CronSchedule.objects.values_list("name", flat=True)) == ["ours", "theirs"]


# -- firing -------------------------------------------------------------------------------
def test_a_new_schedule_does_not_back_fill(declared: list[ScheduleDefinition]) -> None:
    periodic(declared, "cron-new", "0 2 * * *")  # many 02:00 fires lie in the past
    sync(declared)
    assert evaluate() == []
    assert CronSchedule.objects.get().last_fire_at is None


def test_a_new_schedule_first_fires_at_the_next_fire_after_its_sync(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-first", "* * * * * *")
    sync(declared)
    created = CronSchedule.objects.get().created_at
    # Move the sync 3 s into the past instead of sleeping: three whole seconds are due,
    # none of them missed (younger than the grace), so all are enqueued, from the first
    # second after the sync on.
    synced = created - dt.timedelta(seconds=3)
    set_row("cron-first", created_at=synced)
    times = fire_times(evaluate())
    assert synced < times[0] <= synced + dt.timedelta(seconds=1)
    assert times == [times[0] + dt.timedelta(seconds=s) for s in range(len(times))]
    assert len(times) >= 3 and times[-1] <= db_now()


def test_a_fire_enqueues_its_job_with_cron_metadata_in_one_statement(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-fire", "* * * * *", priority=3, metadata={"team": "ops"})
    sync(declared)
    now = db_now()
    set_row("cron-fire", last_fire_at=minute(now) - dt.timedelta(minutes=1))

    (job,) = evaluate()
    assert (job.kind, job.queue, job.priority, job.state, job.args) == (
        "cron_test",
        Q,
        3,
        "available",
        {"n": 1},
    )
    assert job.metadata["cron_name"] == "cron-fire" and job.metadata["team"] == "ops"
    assert fire_times([job]) == [minute(now)]
    row = CronSchedule.objects.get()
    assert row.last_fire_at == minute(now) and row.last_job_id == job.id
    assert evaluate() == []  # that fire is taken


def test_coalesce_enqueues_only_the_latest_missed_fire(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-co", "* * * * *")
    sync(declared)
    now = db_now()
    set_row("cron-co", last_fire_at=minute(now) - dt.timedelta(minutes=10))
    jobs = evaluate()
    assert fire_times(jobs) == [minute(now)]


def test_catch_up_enqueues_every_missed_fire_in_order(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-cu", "* * * * *", missed_fire_policy="catch_up")
    sync(declared)
    now = db_now()
    set_row("cron-cu", last_fire_at=minute(now) - dt.timedelta(minutes=10))
    jobs = evaluate()
    expected = [minute(now) - dt.timedelta(minutes=m) for m in range(9, -1, -1)]
    assert fire_times(jobs) == expected
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)


def test_catch_up_is_capped_per_pass_and_continues_on_the_next(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-cap", "* * * * *", missed_fire_policy="catch_up")
    sync(declared)
    now = db_now()
    set_row("cron-cap", last_fire_at=minute(now) - dt.timedelta(minutes=150))
    first, second = evaluate(), evaluate()
    assert (len(first), len(second)) == (100, 50)
    times = fire_times(first + second)
    assert times == sorted(set(times)) and times[-1] == minute(now)


def test_a_paused_schedule_does_not_fire_and_its_policy_decides_on_resume(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-pause", "* * * * *")
    sync(declared)
    now = db_now()
    set_row("cron-pause", last_fire_at=minute(now) - dt.timedelta(minutes=5))
    client = Client()
    paused = client.pause_schedule("cron-pause", by="ops")
    assert paused.paused and paused.paused_by == "ops" and paused.next_fire_at is None
    assert evaluate() == []
    assert sync(declared) == [] and client.schedule("cron-pause").paused  # redeploy: paused
    client.resume_schedule("cron-pause")
    assert fire_times(evaluate()) == [minute(now)]  # coalesce: one job for the paused time


def test_a_short_pause_coalesces_the_fires_it_skipped(declared: list[ScheduleDefinition]) -> None:
    """Fires due while the schedule was paused are missed however short the pause, even
    within the grace that a late pass of a healthy leader gets (decision 034)."""
    periodic(declared, "cron-blip", "* * * * * *")
    sync(declared)
    client = Client()
    client.pause_schedule("cron-blip")
    set_row("cron-blip", last_fire_at=db_now().replace(microsecond=0) - dt.timedelta(seconds=4))
    client.resume_schedule("cron-blip")
    (job,) = evaluate()  # coalesce: one job, for the latest of the four paused seconds
    resumed_at = CronSchedule.objects.get().resumed_at
    assert resumed_at is not None and fire_times([job])[0] <= db_now()
    client.resume_schedule("cron-blip")  # resuming an active schedule changes nothing
    assert CronSchedule.objects.get().resumed_at == resumed_at


def test_trigger_enqueues_one_job_now_and_leaves_the_fire_sequence_alone(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-trig", "0 2 * * *")
    sync(declared)
    client = Client()
    client.pause_schedule("cron-trig")  # allowed while paused
    job = client.trigger_schedule("cron-trig")
    assert job.metadata["cron_name"] == "cron-trig" and job.metadata["triggered_manually"]
    assert abs(fire_times([job])[0] - db_now()) < dt.timedelta(seconds=5)
    row = CronSchedule.objects.get()
    assert row.last_fire_at is None and row.last_job_id == job.id
    with pytest.raises(ScheduleNotFound):
        client.trigger_schedule("nope")


def test_client_lists_schedules_with_their_next_fire_and_removes_them(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-list", "30 2 * * *", timezone="Europe/Berlin")
    sync(declared)
    client = Client()
    (listed,) = client.schedules()
    assert listed.name == "cron-list" and listed.expression == "30 2 * * *"
    assert listed.next_fire_at is not None and listed.next_fire_at > db_now()
    assert listed.next_fire_at.astimezone(BERLIN).time() in (dt.time(2, 30), dt.time(3, 0))
    client.remove_schedule("cron-list")
    assert client.schedules() == []
    for verb in (client.remove_schedule, client.pause_schedule, client.resume_schedule):
        with pytest.raises(ScheduleNotFound):
            verb("cron-list")


def test_hooks_see_cron_jobs_like_any_other_job(declared: list[ScheduleDefinition]) -> None:
    awa_django.periodic("acc-hooked", "* * * * *", AccNoop(n=5))
    declared.append(registry.schedules()[0])
    sync(declared)
    set_row("acc-hooked", last_fire_at=minute(db_now()) - dt.timedelta(minutes=1))
    (job,) = evaluate()
    with capture_events() as captured:
        assert drain("acc") == 1
    (completed,) = captured.of_type(Completed)
    assert completed.job.id == job.id and completed.job.metadata["cron_name"] == "acc-hooked"


def test_migration_0012_adds_resumed_at_under_existing_schedules(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-mig", "* * * * *")
    sync(declared)
    now = db_now()
    set_row("cron-mig", last_fire_at=minute(now) - dt.timedelta(minutes=1), paused=True)
    MigrationExecutor(connection).migrate([("awa_django", "0011_lease_epochs")])
    try:
        with connection.cursor() as cursor:
            columns = connection.introspection.get_table_description(cursor, "awa_cron_schedules")
        assert "resumed_at" not in {column.name for column in columns}
    finally:
        call_command("migrate", "awa_django", verbosity=0)
    row = CronSchedule.objects.get()
    assert (row.resumed_at, row.paused) == (None, True)  # NULL: judged by age, as before
    Client().resume_schedule("cron-mig")
    # The migrations take seconds (more on a loaded machine): the minute may have turned
    # since `now`, and then the coalesced fire is the new minute's. One fire, either way.
    before = db_now()
    fired = fire_times(evaluate())
    assert fired in ([minute(before)], [minute(db_now())]), (now, before, fired)


# -- a healthy leader, a failover and an outage, under a controlled clock -----------------
START = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def jittered(first: float, last: float, rng: random.Random) -> list[float]:
    """Pass offsets (seconds after START) from `first` until `last`, 0.4 to 1.9 s apart, as
    a loaded leader's passes come (the loop's tick, slow maintenance steps, GC)."""
    offsets: list[float] = []
    while first < last:
        offsets.append(first)
        first += rng.uniform(0.4, 1.9)
    return offsets


def run_passes(passes: list[tuple[float, int]], leaders: int = 1) -> None:
    """Each (offset, leader): that leader's scheduler runs one pass with the clock at
    START + offset. Leader -1: every leader at once, concurrently (two that both believe
    they lead)."""
    now = [START]

    async def run(db: Database) -> None:
        schedulers = [CronScheduler(db, list, clock=lambda: now[0]) for _ in range(leaders)]
        for offset, leader in passes:
            now[0] = START + dt.timedelta(seconds=offset)
            chosen = schedulers if leader == -1 else [schedulers[leader]]
            await asyncio.gather(*(s.run_once() for s in chosen))

    with_db(run)


def fired(name: str) -> list[dt.datetime]:
    rows = Job.objects.filter(metadata__cron_name=name).values_list("metadata", flat=True)
    return sorted(dt.datetime.fromisoformat(m["cron_fire_time"]) for m in rows)


def seconds(first: int, last: int) -> list[dt.datetime]:
    return [START + dt.timedelta(seconds=s) for s in range(first, last + 1)]


@pytest.mark.parametrize("policy", ["coalesce", "catch_up"])
def test_a_healthy_leader_under_pass_jitter_fires_every_second_exactly_once(
    declared: list[ScheduleDefinition], policy: str
) -> None:
    """Issue 26: with coalesce, a pass slightly more than a second after the previous one
    dropped a fire. A per-second schedule evaluated for 60 s by jittered passes, some run
    by two leaders at once, enqueues 60 jobs: no duplicate, no gap."""
    periodic(declared, "cron-jitter", "* * * * * *", missed_fire_policy=policy)
    sync(declared)
    set_row("cron-jitter", created_at=START)
    rng = random.Random(26)
    offsets = [*jittered(0.3, 60, rng), 60.5]
    # The jitter holds what dropped fires: passes more than a second apart across two fires.
    assert any(int(b) - int(a) >= 2 for a, b in itertools.pairwise(offsets))
    run_passes([(o, -1 if i % 7 == 3 else 0) for i, o in enumerate(offsets)], leaders=2)
    assert fired("cron-jitter") == seconds(1, 60)
    assert Job.objects.filter(metadata__cron_name="cron-jitter").count() == 60


@pytest.mark.parametrize(("down", "coalesced"), [(35.0, False), (90.0, True)])
def test_a_failover_within_the_grace_loses_nothing_and_a_longer_outage_coalesces(
    declared: list[ScheduleDefinition], down: float, coalesced: bool
) -> None:
    """Leader 0 evaluates for 10 s and dies; leader 1 takes over `down` seconds later. A
    failover (35 s: a lease of 30 s expiring plus an election) is within CRON_INTERVAL +
    CRON_GRACE, so the new leader enqueues every second the gap owes, each once; a longer
    outage is a real one, and coalesce enqueues one job for it."""
    periodic(declared, "cron-failover", "* * * * * *")
    sync(declared)
    set_row("cron-failover", created_at=START)
    rng = random.Random(27)
    before = [(o, 0) for o in jittered(0.3, 10, rng)]
    back = 10 + down
    after = [(o, 1) for o in [*jittered(back, back + 10, rng), back + 10.5]]
    run_passes(before + after, leaders=2)
    last_before = int(before[-1][0])
    # Coalesced: one job for the gap (its latest second, the takeover's), then each second.
    resumed_from = int(back) if coalesced else last_before + 1
    assert fired("cron-failover") == seconds(1, last_before) + seconds(resumed_from, int(back) + 10)


# -- two leaders at once ------------------------------------------------------------------
def test_cron_schedule_fire_is_a_compare_and_swap_between_two_connections(
    declared: list[ScheduleDefinition],
) -> None:
    """Leader A's fire holds the row (uncommitted) while leader B attempts the same fire:
    B waits, re-checks last_fire_at after A commits, and enqueues nothing."""
    periodic(declared, "cron-race", "* * * * *")
    sync(declared)
    fire_at = minute(db_now())
    query = cron_sql.cron_schedule_fire(
        name="cron-race", expected_last=None, fire_at=fire_at, fire_time=fire_at.isoformat()
    )
    kwargs = connection_kwargs("default", "awa-cron-race")

    async def race() -> tuple[JobSnapshot | None, JobSnapshot | None]:
        a = await psycopg.AsyncConnection.connect(**{**kwargs, "autocommit": False})
        b = await psycopg.AsyncConnection.connect(**kwargs)
        try:
            won = await query.arun(a)  # in A's open transaction: the row stays locked
            lost = asyncio.ensure_future(query.arun(b))
            await wait_for_lock_wait()
            assert not lost.done()
            await a.commit()
            return won, await lost
        finally:
            await a.close()
            await b.close()

    won, lost = asyncio.run(race())
    assert won is not None and lost is None
    assert list(Job.objects.values_list("id", flat=True)) == [won.id]


async def wait_for_lock_wait() -> None:
    """Until some backend waits on a lock (B's UPDATE behind A's)."""
    async with await psycopg.AsyncConnection.connect(
        **connection_kwargs("default", "awa-cron-probe")
    ) as probe:
        for _ in range(500):
            cursor = await probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND application_name = 'awa-cron-race'"
            )
            row = await cursor.fetchone()
            if row and row[0]:
                return
            await asyncio.sleep(0.01)
    raise AssertionError("the second fire never waited for the first")


def test_two_schedulers_evaluating_the_same_due_fires_enqueue_each_once(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-two", "* * * * *", missed_fire_policy="catch_up")
    sync(declared)
    now = db_now()
    set_row("cron-two", last_fire_at=minute(now) - dt.timedelta(minutes=20))

    async def both() -> list[list[JobSnapshot]]:
        dbs = [Database("default", f"awa-cron-leader-{i}", max_size=2) for i in (0, 1)]
        for db in dbs:
            await db.open()
        try:
            return list(await asyncio.gather(*(CronScheduler(db, list).run_once() for db in dbs)))
        finally:
            for db in dbs:
                await db.close()

    results = asyncio.run(both())
    jobs = [job for result in results for job in result]
    times = fire_times(jobs)
    assert sorted(times) == [minute(now) - dt.timedelta(minutes=m) for m in range(19, -1, -1)]
    assert Job.objects.count() == 20  # every fire exactly once, whoever took it
    # None of them fires again. The next minute's fire is due if the clock turned over
    # since `now` (this test once failed on that alone).
    assert [t for t in fire_times(evaluate()) if t <= minute(now)] == []


def test_a_fire_with_a_stale_expected_last_fire_enqueues_nothing(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(declared, "cron-stale", "* * * * *")
    sync(declared)
    fire_at = minute(db_now())
    set_row("cron-stale", last_fire_at=fire_at)
    query = cron_sql.cron_schedule_fire(
        name="cron-stale",
        expected_last=fire_at - dt.timedelta(minutes=1),
        fire_at=fire_at,
        fire_time=fire_at.isoformat(),
    )
    assert query.run("default") is None and Job.objects.count() == 0


# -- DST days (Europe/Berlin, fixed dates) ------------------------------------------------
def berlin(year: int, month: int, day: int, hour: int, minute: int) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, tzinfo=BERLIN)


@pytest.mark.parametrize("expression", ["30 2 * * *", "0 30 2 * * *"])
def test_spring_forward_fires_a_skipped_time_once_at_the_first_valid_minute(
    declared: list[ScheduleDefinition], expression: str
) -> None:
    periodic(
        declared, "cron-spring", expression, timezone="Europe/Berlin", missed_fire_policy="catch_up"
    )
    sync(declared)
    set_row("cron-spring", last_fire_at=berlin(2026, 3, 27, 2, 30))
    times = fire_times(evaluate())[:3]
    assert times == [
        berlin(2026, 3, 28, 2, 30),
        berlin(2026, 3, 29, 3, 0),
        berlin(2026, 3, 30, 2, 30),
    ]
    assert [t.utcoffset() for t in times] == [dt.timedelta(hours=h) for h in (1, 2, 2)]


@pytest.mark.parametrize("expression", ["30 2 * * *", "0 30 2 * * *"])
def test_fall_back_fires_a_repeated_time_once_at_its_first_occurrence(
    declared: list[ScheduleDefinition], expression: str
) -> None:
    periodic(
        declared, "cron-fall", expression, timezone="Europe/Berlin", missed_fire_policy="catch_up"
    )
    sync(declared)
    set_row("cron-fall", last_fire_at=berlin(2026, 10, 24, 2, 30))
    times = fire_times(evaluate())[:2]
    assert [t.astimezone(dt.UTC) for t in times] == [
        dt.datetime(2026, 10, 25, 0, 30, tzinfo=dt.UTC),  # 02:30 CEST, not also 02:30 CET
        dt.datetime(2026, 10, 26, 1, 30, tzinfo=dt.UTC),
    ]


def test_an_interval_schedule_runs_on_elapsed_time_across_fall_back(
    declared: list[ScheduleDefinition],
) -> None:
    periodic(
        declared,
        "cron-every30",
        "*/30 * * * *",
        timezone="Europe/Berlin",
        missed_fire_policy="catch_up",
    )
    sync(declared)
    set_row("cron-every30", last_fire_at=berlin(2026, 10, 25, 1, 30))
    times = [t.astimezone(dt.UTC) for t in fire_times(evaluate())[:5]]
    start = dt.datetime(2026, 10, 24, 23, 30, tzinfo=dt.UTC)  # 01:30 CEST
    assert times == [start + dt.timedelta(minutes=30 * i) for i in range(1, 6)]


# -- declaration errors -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"expression": "61 * * * *"}, "invalid"),
        ({"expression": "* * * *"}, "5 fields"),
        ({"timezone": "Mars/Olympus"}, "unknown timezone"),
        ({"missed_fire_policy": "all"}, "missed_fire_policy"),
        ({"priority": 500}, "priority"),
        ({"queue": "bad queue"}, "invalid queue name"),
    ],
)
def test_periodic_rejects_a_bad_declaration(options: dict[str, Any], message: str) -> None:
    expression = options.pop("expression", "0 2 * * *")
    with pytest.raises(InvalidSchedule, match=message):
        awa_django.periodic("cron-bad", expression, {"n": 1}, kind="k", **options)
    assert "cron-bad" not in [d.name for d in registry.schedules()]
