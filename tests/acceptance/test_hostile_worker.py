"""Issue 8 with real worker processes: values the database refuses, attempts that cannot be
written, hooks across a graceful stop, rolling deploys, and an exit when the database
stops answering (DESIGN §4, §5, §7)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator

import pytest
from django.db import connection, transaction
from django.db.models import Count

import awa_django
from awa_django.storage.models import Job, WorkerInstance
from testproject.shop.demo import database_url
from testproject.testjobs.jobs import (
    AccBlock,
    AccHooked,
    AccNoop,
    AccResult,
    AccRolling,
    AccSleep,
    AccUnstorableError,
)
from testproject.testjobs.models import Execution, HookCall
from tests.tcp_proxy import TcpProxy
from tests.waiting import wait_until

from .test_worker_process import listening

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

FINAL_STATES = ("completed", "failed", "cancelled")


def result_n(job: Job) -> int:
    """The `n` a result job stored as its result."""
    assert isinstance(job.result, dict), job.result
    return int(job.result["n"])


def finished(count: int) -> bool:
    return Job.objects.filter(state__in=FINAL_STATES).count() == count


def executions_per_job() -> dict[int, int]:
    rows = Execution.objects.values("job_id").annotate(n=Count("id"))
    return {row["job_id"]: row["n"] for row in rows}


def outcome_hooks(job_id: int) -> list[tuple[str, int]]:
    """(event, pid) of every hook call but Started, in the order they were written."""
    calls = HookCall.objects.filter(job_id=job_id).exclude(event="Started").order_by("id")
    return list(calls.values_list("event", "pid"))


# -- 1. one value the database refuses fails only its own job ------------------------------
def test_one_unstorable_result_among_a_hundred_fails_only_its_own_job(start_worker):
    jobs = [AccResult(n=i) for i in range(101)]
    jobs[50] = AccResult(n=50, lone_surrogate=True)  # among its neighbours, not at an edge
    with transaction.atomic():
        ids = awa_django.enqueue_many(jobs)
    poison_id = ids.pop(50)
    # 25 slots: the neighbours' completions share batches; the codec refuses the poison
    # before it reaches one (the test below covers a refusal inside a batch).
    worker = start_worker("--queue", "acc=25")
    wait_until(lambda: finished(101), timeout=60, what="all 101 jobs to finish")

    good = Job.objects.filter(id__in=ids)
    # Each job that did not complete on its first attempt, with its errors (a rescue says
    # why), so that a failure here tells what happened.
    assert [
        (job.id, job.state, job.attempt, job.errors)
        for job in good
        if (job.state, job.attempt) != ("completed", 1)
    ] == []
    assert {result_n(job) for job in good} == set(range(101)) - {50}
    assert not good.exclude(errors=[]).exists()  # nothing rescued, nothing retried
    poison = Job.objects.get(id=poison_id)
    assert (poison.state, poison.attempt, poison.result) == ("failed", 1, None)
    [entry] = poison.errors
    assert entry["terminal"] is True
    assert entry["type"] == "awa_django.exceptions.SerializationError"
    assert "the outcome of this attempt could not be stored" in entry["error"]
    assert "lone surrogate" in entry["error"]
    assert executions_per_job() == dict.fromkeys([*ids, poison_id], 1)
    assert "rescued job" not in worker.output()
    assert worker.stop() == 0


@pytest.fixture
def refused_results() -> Iterator[None]:
    """For this test only, awa_jobs_hot refuses the result "poison" (SQLSTATE 22023, a data
    error the codec cannot foresee) and writes the result "slow" slowly. A trigger outlives
    the test's TRUNCATE, so it is dropped here whatever the test did, and checked gone."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION acc_refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.result = '"poison"'::jsonb THEN
                    RAISE EXCEPTION 'acc test: the database refuses this result'
                        USING ERRCODE = '22023';
                END IF;
                IF NEW.result = '"slow"'::jsonb THEN
                    PERFORM pg_sleep(1.5);
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER acc_refuse_poison BEFORE UPDATE ON awa_jobs_hot
                FOR EACH ROW EXECUTE FUNCTION acc_refuse_poison();
            """
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS acc_refuse_poison ON awa_jobs_hot")
            cursor.execute("DROP FUNCTION IF EXISTS acc_refuse_poison()")
            cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'acc_refuse_poison'")
            assert cursor.fetchone()[0] == 0


def test_a_result_the_database_refuses_fails_only_its_own_job_in_a_shared_batch(
    refused_results, start_worker
):
    # The "slow" job finishes first and its completion holds the completer for 1.5 s; the
    # 31 others finish 0.5 s after they started, so they wait for the next flush together:
    # one batch, which the database refuses because of the "poison" row in its middle.
    jobs = [AccResult(n=0, result="slow")]
    jobs += [AccResult(n=i, delay=0.5) for i in range(1, 32)]
    jobs[16] = AccResult(n=16, result="poison", delay=0.5)
    with transaction.atomic():
        ids = awa_django.enqueue_many(jobs)
    poison_id = ids.pop(16)
    worker = start_worker("--queue", "acc=40")
    wait_until(lambda: finished(32), timeout=60, what="all 32 jobs to finish")

    good = Job.objects.filter(id__in=ids)
    assert set(good.values_list("state", "attempt")) == {("completed", 1)}
    assert not good.exclude(errors=[]).exists()
    assert "retrying row by row" in worker.output()  # the poison did share a refused batch
    assert {job.result if job.result == "slow" else result_n(job) for job in good} == {
        "slow",
        *(set(range(1, 32)) - {16}),
    }
    poison = Job.objects.get(id=poison_id)
    assert (poison.state, poison.attempt, poison.result) == ("failed", 1, None)
    [entry] = poison.errors
    assert entry["terminal"] is True
    assert entry["type"] == "awa_django.exceptions.OutcomeNotStored"
    assert entry["error"].startswith("the outcome of this attempt could not be stored: ")
    assert "the database refuses this result" in entry["error"]
    assert executions_per_job() == dict.fromkeys([*ids, poison_id], 1)
    assert "rescued job" not in worker.output()
    assert worker.stop() == 0


# -- 2. attempts are a hard bound, whatever goes wrong -------------------------------------
def test_an_error_text_postgres_cannot_store_is_repaired_and_the_job_ends_failed(start_worker):
    job = awa_django.enqueue(AccUnstorableError(), max_attempts=3)
    worker = start_worker("--queue", "acc=2")
    attempts_seen: set[int] = set()

    def failed() -> bool:
        row = Job.objects.get(id=job.id)
        attempts_seen.add(row.attempt)
        return row.state == "failed"

    # Two back-offs of about 2 and 4 s lie between the three attempts.
    wait_until(failed, timeout=30, what="the job to exhaust its 3 attempts")
    row = Job.objects.get(id=job.id)
    assert row.attempt == 3 and max(attempts_seen) <= 3
    assert executions_per_job() == {job.id: 3}
    assert [e["attempt"] for e in row.errors] == [1, 2, 3]
    for entry in row.errors:  # the real message, its NUL and lone surrogate escaped
        assert entry["error"].startswith("RuntimeError: boom \\ud800 \\x00\n"), entry
        assert entry["type"] == "builtins.RuntimeError"
        assert "heartbeat stale" not in entry["error"]
    wait_until(lambda: len(outcome_hooks(job.id)) == 3, what="the Retried and Exhausted hook calls")
    assert [event for event, _ in outcome_hooks(job.id)] == ["Retried", "Retried", "Exhausted"]
    assert "boom \\ud800 \\x00" in HookCall.objects.get(job_id=job.id, event="Exhausted").detail
    assert "rescued job" not in worker.output()
    assert worker.stop() == 0


def test_a_job_killed_on_its_last_attempt_ends_failed_with_one_exhausted_event(
    start_worker,
):
    job = awa_django.enqueue(AccSleep(30.0), max_attempts=1)
    victim = start_worker("--queue", "acc=1")
    wait_until(lambda: Execution.objects.filter(job_id=job.id).exists(), what="the attempt")
    victim.kill()
    rescuer = start_worker("--queue", "acc=1")
    wait_until(
        HookCall.objects.filter(job_id=job.id, event="Exhausted").exists,
        timeout=30,
        what="the Exhausted hook in the second worker",
    )
    row = Job.objects.get(id=job.id)
    assert (row.state, row.attempt) == ("failed", 1)  # rescued, not claimed again
    [entry] = row.errors
    assert entry["terminal"] is True and "heartbeat stale" in entry["error"]
    # One transition, one event (decision 035): Exhausted with the rescue's reason.
    assert outcome_hooks(job.id) == [("Exhausted", rescuer.pid)]
    assert HookCall.objects.get(job_id=job.id, event="Exhausted").detail == "stale_heartbeat"
    assert executions_per_job() == {job.id: 1}  # never run again
    assert rescuer.stop() == 0


# -- 3. hooks across a graceful stop -------------------------------------------------------
def test_a_graceful_stop_delivers_every_pending_hook_event(start_worker):
    # The last 100 jobs have a hook that takes 0.2 s: about 2.5 s of hook work is still
    # queued when the last job completes, and only the drain can deliver it.
    with transaction.atomic():
        awa_django.enqueue_many(
            [AccHooked(i, hook_seconds=0.2 if i >= 9_900 else 0.0) for i in range(10_000)]
        )
    # Production timings: with no crash, nothing may be rescued, so nothing runs twice.
    # Persistent connections, as in production: with Django's default CONN_MAX_AGE=0 every
    # hook call opens a connection of its own, and the drain takes five times as long.
    env = {"DATABASE_URL": database_url(connection.settings_dict) + "?conn_max_age=600"}
    workers = [
        start_worker("--queue", "acc=10", "--shutdown-grace", "60", fast=False, env=env)
        for _ in range(2)
    ]
    began = time.monotonic()
    wait_until(
        lambda: not Job.objects.exclude(state="completed").exists(),
        timeout=120,
        what="all 10,000 jobs completed",
    )
    for worker in workers:
        worker.signal(signal.SIGTERM)
    delivered_at_signal = HookCall.objects.count()
    signalled = time.monotonic()
    assert [worker.wait(timeout=90) for worker in workers] == [0, 0]
    print(
        f"10,000 jobs completed in {signalled - began:.1f}s with {delivered_at_signal} hook "
        f"calls delivered; the drain took {time.monotonic() - signalled:.1f}s"
    )

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT job_id), array_agg(DISTINCT event), "
            "array_agg(DISTINCT pid) FROM testjobs_hookcall"
        )
        rows, jobs, events, pids = cursor.fetchone()
    assert (rows, jobs, events) == (10_000, 10_000, ["Completed"])
    assert sorted(pids) == sorted(w.pid for w in workers)
    assert delivered_at_signal < 10_000  # the drain had events left to deliver
    for worker in workers:
        assert "dropped" not in worker.output()
        assert "not delivered" not in worker.output()


def lag_sampler(kind: str) -> tuple[list[int], Callable[[int], bool]]:
    """Samples how many completions of `kind` are still waiting for their Completed hook
    (one statement: one snapshot); returns the samples and the sampling predicate."""
    samples: list[int] = []

    def hooks_caught_up(total: int) -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT count(*) FROM awa_jobs_hot WHERE kind = %s "
                "AND state = 'completed'), (SELECT count(*) FROM testjobs_hookcall "
                "WHERE event = 'Completed')",
                [kind],
            )
            completed, hooked = cursor.fetchone()
        samples.append(completed - hooked)
        return completed == hooked == total

    return samples, hooks_caught_up


TINY_BACKLOG = 5
PACED = 200  # jobs whose Completed hook takes 50 ms: 2.5 s of hook work on 4 consumers


def test_pause_overflow_holds_claims_back_and_drops_no_event(start_worker):
    awa_django.enqueue_many([AccHooked(i, hook_seconds=0.05) for i in range(PACED)])
    worker = start_worker(
        "--queue",
        "acc=10",
        env={"AWA_HOOK_OVERFLOW": "pause", "AWA_HOOK_BACKLOG": str(TINY_BACKLOG)},
    )
    lags, hooks_caught_up = lag_sampler("acc_hooked")
    wait_until(lambda: hooks_caught_up(PACED), timeout=60, what="every Completed hook call")
    assert worker.stop() == 0
    assert HookCall.objects.values("job_id").distinct().count() == PACED
    assert HookCall.objects.count() == PACED
    # The queue went at the hooks' pace: completions stayed within a few claims of their
    # hooks (measured ~30: the backlog of 5, up to two claims of 10 whose Completed events
    # had not reached it yet, the 4 being delivered). Without the pause, ~190 ahead.
    assert max(lags) <= 50, lags
    assert "dropped" not in worker.output()


def test_drop_overflow_drops_events_and_says_so(start_worker):
    """The counterpart of the test above: its load does overflow the tiny backlog, since
    under "drop" the same load loses hook calls, and the log says so."""
    awa_django.enqueue_many([AccHooked(i, hook_seconds=0.05) for i in range(PACED)])
    worker = start_worker(
        "--queue",
        "acc=10",
        env={"AWA_HOOK_OVERFLOW": "drop", "AWA_HOOK_BACKLOG": str(TINY_BACKLOG)},
    )
    wait_until(lambda: finished(PACED), timeout=60, what="all jobs completed")
    assert worker.stop() == 0  # the drain delivers what was queued, not what was dropped
    assert HookCall.objects.count() < PACED
    assert "dropped" in worker.output()


# -- 4. rolling deploys --------------------------------------------------------------------
WITHOUT_ROLLING = {"AWA_TEST_WITHOUT_KINDS": "acc_rolling"}


def test_a_rolling_deploy_runs_each_job_once_on_the_new_worker(start_worker):
    """The old worker never claims the kind it lacks (decision 032): the jobs wait,
    untouched and listed as unhandled, until a worker with the handler runs them."""
    old = start_worker("--queue", "acc=4", "--worker-id", "old", env=WITHOUT_ROLLING)
    wait_until(listening, what="the old worker")
    ids = awa_django.enqueue_many([AccRolling(i) for i in range(20)])
    wait_until(
        lambda: "acc_rolling" in awa_django.Client().unhandled_kinds(),
        what="the kind listed as unhandled",
    )
    done = awa_django.enqueue(AccNoop(1))  # the old worker claims what it has meanwhile
    wait_until(lambda: Job.objects.get(id=done.id).state == "completed", what="the old worker")
    for row in Job.objects.filter(id__in=ids):
        assert (row.state, row.attempt, row.attempted_by, row.errors) == ("available", 0, [], [])
    assert not Execution.objects.filter(job_id__in=ids).exists()

    new = start_worker("--queue", "acc=4", "--worker-id", "new")
    wait_until(
        WorkerInstance.objects.filter(worker_id="new").exists, what="the new worker registered"
    )
    assert old.stop() == 0  # the deploy retires the old worker
    wait_until(
        lambda: Job.objects.filter(id__in=ids, state="completed").count() == len(ids),
        timeout=30,
        what="the new worker to run every job",
    )
    for row in Job.objects.filter(id__in=ids):
        assert (row.attempt, row.attempted_by, row.errors) == (1, ["new"], [])
    assert executions_per_job() == {**dict.fromkeys(ids, 1), done.id: 1}
    ran = Execution.objects.filter(job_id__in=ids).values_list("pid", flat=True)
    assert set(ran) == {new.pid}
    assert not Job.objects.filter(state="failed").exists()
    assert new.stop() == 0


def test_a_kind_no_worker_has_fails_once_the_unknown_kind_grace_has_passed(start_worker):
    worker = start_worker("--queue", "acc=1", "--unknown-kind-grace", "1")
    # The grace counts from run_at: enqueue once the worker is up, so that the bound below
    # measures the grace, a poll and a claim, not how long a loaded machine takes to start
    # a Python process.
    wait_until(listening, what="worker LISTEN connection")
    job = awa_django.enqueue({"x": 1}, kind="acc_nobody_has", queue="acc")
    wait_until(lambda: Job.objects.get(id=job.id).state == "failed", timeout=30, what="fail")
    row = Job.objects.get(id=job.id)
    [failure] = row.errors  # never handed back: claimed once the grace passed (decision 032)
    assert failure["terminal"] is True
    assert failure["error"].startswith("unknown job kind: acc_nobody_has")
    assert row.attempt == 1
    assert row.finalized_at is not None
    waited = (row.finalized_at - row.run_at).total_seconds()
    print(f"failed {waited:.2f}s after it was due (grace 1s)")
    assert 1 <= waited < 3, waited  # the grace, plus a poll and a claim
    after = awa_django.enqueue(AccNoop(1))
    wait_until(lambda: Job.objects.get(id=after.id).state == "completed", what="the worker")
    assert worker.stop() == 0


# -- 5. a bounded exit when the database stops answering ------------------------------------
@pytest.fixture
def db_proxy() -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_port=int(connection.settings_dict.get("PORT") or 5432))
    try:
        yield proxy
    finally:
        proxy.stop()
        assert not any(thread.is_alive() for thread in proxy.threads)


def proxied_database_url(port: int) -> str:
    settings = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": str(port)}
    return database_url(settings)


GRACE = 2.0


def test_sigterm_ends_the_worker_in_bounded_time_when_the_database_stops_answering(
    db_proxy, start_worker
):
    worker = start_worker(
        "--queue",
        "acc=2",
        "--shutdown-grace",
        str(GRACE),
        env={"DATABASE_URL": proxied_database_url(db_proxy.port)},
    )
    job = awa_django.enqueue(AccNoop(1))
    wait_until(lambda: Job.objects.get(id=job.id).state == "completed", what="a job via proxy")
    assert db_proxy.connections >= 2  # the worker really talks through the proxy
    stuck = awa_django.enqueue(AccBlock(30.0))  # a handler that outlives the grace
    wait_until(lambda: Execution.objects.filter(job_id=stuck.id).exists(), what="its attempt")
    db_proxy.blackhole()
    wait_until(lambda: db_proxy.stalled, what="a worker statement hanging in the blackhole")
    began = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(timeout=60)
    took = time.monotonic() - began
    print(f"exit after SIGTERM with the database silent: {took:.2f}s (code {code})")
    assert took < GRACE + 5, (took, worker.output())
    assert code == 1  # unclean: the blocked attempt is left to rescue
    assert "gave up" in worker.output()  # the exit did meet a silent database
