"""The core guarantees, proven with real worker processes (issue 2's invariants)."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import connection, transaction

import awa_django
from awa_django.storage.models import ActiveLease, Job, LeaderLease, WorkerInstance
from testproject.testjobs.jobs import AccBlock, AccNoop, AccSleep
from testproject.testjobs.models import Execution, HookCall
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def workers_whose_last_statement(condition: str) -> int:
    """How many worker backends of this database last ran a statement matching
    `condition` (SQL on pg_stat_activity's `query`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            f"AND application_name LIKE 'awa-worker%%' AND ({condition})"
        )
        return int(cursor.fetchone()[0])


def listening(worker_count: int = 1) -> bool:
    """True once `worker_count` workers hold their LISTEN connection: its last statement
    is the last LISTEN of the set-up, or a waker role statement, which runs only after it
    (taking the role ends with the LISTEN for the queue's hints, giving it up with the
    UNLISTEN)."""
    return (
        workers_whose_last_statement(
            "query = 'LISTEN \"awa_cancel\"' OR query LIKE '%%LISTEN \"awa:%%'"
            " OR query LIKE 'SELECT %%pg\\_%%advisory\\_%%'"
        )
        >= worker_count
    )


def state_of(job_id: int) -> str:
    return Job.objects.get(id=job_id).state


def started(job_id: int) -> bool:
    return Execution.objects.filter(job_id=job_id).exists()


def test_commit_wakes_an_idle_worker_without_waiting_for_the_poll(start_worker):
    start_worker("--queue", "acc=2", "--poll-interval", "30")
    wait_until(listening, what="worker LISTEN connection")
    with transaction.atomic():
        job = awa_django.enqueue(AccNoop(1))
    began = time.monotonic()
    wait_until(lambda: state_of(job.id) == "completed", timeout=10, what="pickup")
    assert time.monotonic() - began < 5  # far below the 30 s poll: NOTIFY woke it


def test_rolled_back_enqueue_leaves_nothing_for_the_worker(start_worker):
    start_worker("--queue", "acc=2")
    wait_until(listening)
    with pytest.raises(RuntimeError), transaction.atomic():
        awa_django.enqueue(AccNoop(1))
        raise RuntimeError("roll back")
    marker = awa_django.enqueue(AccNoop(2))
    wait_until(lambda: state_of(marker.id) == "completed", what="marker job")
    assert Job.objects.count() == 1
    assert Execution.objects.count() == 1


def test_paused_worker_cannot_overwrite_the_newer_attempt(start_worker):
    """SIGSTOP past staleness → rescued and re-run elsewhere → SIGCONT: stale outcome."""
    job = awa_django.enqueue(AccSleep(2.0))
    first = start_worker("--queue", "acc=1", "--worker-id", "first")
    wait_until(lambda: started(job.id), what="first attempt to start")
    first.signal(signal.SIGSTOP)
    second = start_worker("--queue", "acc=1", "--worker-id", "second")
    wait_until(lambda: state_of(job.id) == "completed", timeout=30, what="rescue and re-run")
    done = Job.objects.get(id=job.id)
    assert done.attempt == 2 and done.attempted_by[-1] == "second"
    assert "heartbeat stale" in done.errors[-1]["error"]
    first.signal(signal.SIGCONT)
    wait_until(lambda: "is stale" in first.output(), timeout=20, what="stale outcome log")
    after = Job.objects.get(id=job.id)
    assert (after.state, after.run_lease, after.finalized_at) == (
        "completed",
        done.run_lease,
        done.finalized_at,
    )
    leases = sorted(Execution.objects.filter(job_id=job.id).values_list("run_lease", flat=True))
    assert len(leases) == 2 and leases[-1] == done.run_lease  # one run per claim
    assert first.stop() == 0 and second.stop() == 0
    outcome_events = HookCall.objects.filter(job_id=job.id).exclude(event="Started")
    assert not outcome_events.filter(run_lease=1).exclude(event="Rescued").exists()
    assert list(outcome_events.filter(event="Completed").values_list("pid", flat=True)) == [
        second.pid
    ]


def test_killed_worker_job_is_rescued_and_completed_exactly_once(start_worker):
    job = awa_django.enqueue(AccSleep(3.0))
    victim = start_worker("--queue", "acc=1")
    wait_until(lambda: started(job.id), what="attempt to start")
    victim.kill()
    rescuer = start_worker("--queue", "acc=1")
    wait_until(lambda: state_of(job.id) == "completed", timeout=30, what="rescue")
    # Hooks run after the commit, on the worker's hook queue: wait for the last event's.
    completed_hook = HookCall.objects.filter(job_id=job.id, event="Completed")
    wait_until(completed_hook.exists, what="the Completed hook")
    assert Execution.objects.filter(job_id=job.id).count() == 2
    assert completed_hook.count() == 1
    assert HookCall.objects.filter(job_id=job.id, event="Rescued").count() == 1
    assert not ActiveLease.objects.filter(job_id=job.id).exists()
    assert rescuer.stop() == 0


def test_a_worker_killed_before_its_first_heartbeat_has_its_job_rescued(start_worker):
    """Decision 030: the claim writes no lease and the victim never beats (its interval is
    a minute), so the rescue goes by the claim's attempted_at once it is stale."""
    job = awa_django.enqueue(AccSleep(3.0))
    victim = start_worker("--queue", "acc=1", "--heartbeat-interval", "60")
    wait_until(lambda: started(job.id), what="attempt to start")
    assert not ActiveLease.objects.filter(job_id=job.id).exists()
    victim.kill()
    rescuer = start_worker("--queue", "acc=1")
    wait_until(lambda: state_of(job.id) == "completed", timeout=30, what="rescue")
    done = Job.objects.get(id=job.id)
    assert done.attempt == 2 and "heartbeat stale" in done.errors[-1]["error"]
    assert Execution.objects.filter(job_id=job.id).count() == 2
    assert rescuer.stop() == 0


def test_two_workers_drain_ten_thousand_jobs_each_exactly_once(start_worker):
    with transaction.atomic():
        awa_django.enqueue_many([AccNoop(i) for i in range(10_000)])
    # Production timings: with no crash, nothing may be rescued, so nothing runs twice.
    workers = [start_worker("--queue", "acc=10", fast=False) for _ in range(2)]
    wait_until(
        lambda: not Job.objects.exclude(state="completed").exists(),
        timeout=180,
        what="all 10,000 jobs completed",
    )
    assert Job.objects.filter(state="completed").count() == 10_000
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT job_id), count(DISTINCT pid) FROM testjobs_execution"
        )
        executions, distinct_jobs, pids = cursor.fetchone()
    rescued = Job.objects.exclude(errors=[]).count()
    assert (executions, distinct_jobs, rescued) == (10_000, 10_000, 0)
    assert pids == 2  # both processes took part
    assert [w.stop() for w in workers] == [0, 0]


def test_handler_past_its_deadline_is_rescued_while_heartbeating(start_worker):
    job = awa_django.enqueue(AccBlock(30.0), max_attempts=1)
    worker = start_worker("--queue", "acc=1", "--deadline", "1", "--shutdown-grace", "1")
    wait_until(lambda: started(job.id), what="attempt to start")
    wait_until(
        lambda: any(
            "hard deadline exceeded" in e["error"] for e in Job.objects.get(id=job.id).errors
        ),
        timeout=15,
        what="deadline rescue",
    )
    # It was the job's only attempt: attempts are a hard bound, so rescue fails the job
    # (decision 009) and the leader fires one event for it: Exhausted with the rescue's
    # reason, no Rescued (decision 035).
    rescued = Job.objects.get(id=job.id)
    assert (rescued.state, rescued.attempt, rescued.errors[-1]["terminal"]) == ("failed", 1, True)
    wait_until(
        HookCall.objects.filter(job_id=job.id, event="Exhausted").exists,
        what="Exhausted hook in the leader",
    )
    hooks = list(
        HookCall.objects.filter(job_id=job.id).order_by("id").values_list("event", "detail")
    )
    assert hooks == [("Started", ""), ("Exhausted", "deadline_exceeded")], hooks
    worker.kill()


def test_exactly_one_leader_and_failover_when_it_dies(start_worker):
    a = start_worker("--queue", "acc=1", "--worker-id", "a")
    b = start_worker("--queue", "acc=1", "--worker-id", "b")
    wait_until(lambda: WorkerInstance.objects.count() == 2, what="both workers registered")
    leader = wait_until(lambda: LeaderLease.objects.first(), what="a leader")
    assert leader.holder in ("a", "b")
    wait_until(lambda: WorkerInstance.objects.filter(leader=True).count() == 1, what="flags")
    assert WorkerInstance.objects.filter(leader=True).get().worker_id == leader.holder
    (a if leader.holder == "a" else b).kill()
    other = "b" if leader.holder == "a" else "a"
    began = time.monotonic()
    wait_until(
        lambda: LeaderLease.objects.filter(holder=other).exists(), timeout=10, what="failover"
    )
    assert time.monotonic() - began < 1 + 0.2 + 1.5  # ttl + election interval + slack


def test_sigterm_drains_in_flight_jobs_and_exits_zero(start_worker):
    jobs = [awa_django.enqueue(AccSleep(1.0)) for _ in range(4)]
    worker = start_worker("--queue", "acc=2")
    wait_until(lambda: Execution.objects.count() == 2, what="two attempts running")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    states = sorted(state_of(j.id) for j in jobs)
    assert states == ["available", "available", "completed", "completed"]
    assert not ActiveLease.objects.exists()
    assert not WorkerInstance.objects.exists()


def test_second_signal_exits_at_once_and_leaves_the_attempt_to_rescue(start_worker):
    job = awa_django.enqueue(AccBlock(60.0))
    worker = start_worker("--queue", "acc=1", "--shutdown-grace", "60")
    wait_until(lambda: started(job.id), what="attempt to start")
    worker.signal(signal.SIGTERM)
    wait_until(lambda: "stopping" in worker.output(), what="drain to begin")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=5) != 0
    assert state_of(job.id) == "running"  # still leased: the next leader rescues it
    start_worker("--queue", "acc=1", "--shutdown-grace", "1")
    wait_until(
        lambda: Job.objects.get(id=job.id).attempt == 2, timeout=20, what="rescue and re-claim"
    )


def test_processes_flag_runs_several_workers_under_one_supervisor(start_worker):
    with transaction.atomic():
        awa_django.enqueue_many([AccNoop(i) for i in range(200)])
    supervisor = start_worker("--queue", "acc=4", "--processes", "2")
    wait_until(lambda: WorkerInstance.objects.count() == 2, what="two worker processes")
    wait_until(lambda: not Job.objects.exclude(state="completed").exists(), what="drain")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0
    assert not WorkerInstance.objects.exists()  # both children drained and deregistered


def test_a_handler_calling_sys_exit_fails_its_job_and_the_worker_goes_on(start_worker):
    from testproject.testjobs.jobs import AccExit

    doomed = awa_django.enqueue(AccExit(3))
    worker = start_worker("--queue", "acc=1")
    wait_until(lambda: state_of(doomed.id) == "failed", what="the exiting job to fail")
    assert "SystemExit" in Job.objects.get(id=doomed.id).errors[-1]["error"]
    after = awa_django.enqueue(AccNoop(1))
    wait_until(lambda: state_of(after.id) == "completed", what="the worker to go on")
    assert worker.stop() == 0


def test_grace_timeout_ends_the_process_even_while_a_sync_handler_runs(start_worker):
    job = awa_django.enqueue(AccBlock(60.0))
    worker = start_worker("--queue", "acc=1", "--shutdown-grace", "1")
    wait_until(lambda: started(job.id), what="attempt to start")
    began = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 1  # unclean: an attempt was left to rescue
    assert time.monotonic() - began < 10


def test_ctrl_c_on_the_supervisor_drains_its_children(start_worker):
    job = awa_django.enqueue(AccSleep(1.0))
    supervisor = start_worker("--queue", "acc=1", "--processes", "2")
    wait_until(lambda: started(job.id), what="attempt to start")
    supervisor.signal_group(signal.SIGINT)  # every process of the group gets SIGINT
    assert supervisor.wait(timeout=30) == 0
    assert state_of(job.id) == "completed"
    assert "second stop signal" not in supervisor.output()


def test_bad_args_fail_and_unknown_kinds_are_left_to_others_while_the_worker_goes_on(
    start_worker,
):
    unknown = awa_django.enqueue({"x": 1}, kind="acc_no_such_kind", queue="acc")
    path = awa_django.enqueue({"x": 1}, kind="testproject.no_such_module.task", queue="acc")
    bad_args = awa_django.enqueue({"seconds": "soon"}, kind="acc_sleep", queue="acc")
    worker = start_worker("--queue", "acc=2", "--worker-id", "w")
    wait_until(lambda: state_of(bad_args.id) == "failed", what="bad args to fail")
    assert "args do not fit AccSleep" in Job.objects.get(id=bad_args.id).errors[-1]["error"]
    # An import path (a django.tasks kind, resolved on demand) that this worker cannot
    # resolve is handed back once, uncounted, and never claimed by it again; a kind it
    # does not list it never claims (decision 032).
    wait_until(lambda: Job.objects.get(id=path.id).errors, what="the hand-back")
    wait_until(lambda: state_of(path.id) == "available", what="the promotion")
    after = awa_django.enqueue(AccNoop(1))
    wait_until(lambda: state_of(after.id) == "completed", what="the worker to go on")
    handed_back = Job.objects.get(id=path.id)
    assert (handed_back.attempt, handed_back.attempted_by) == (0, ["w"])
    [entry] = handed_back.errors
    assert entry["type"].endswith("UnknownJobKind") and "handed back" in entry["error"]
    untouched = Job.objects.get(id=unknown.id)
    assert (untouched.state, untouched.attempt, untouched.errors) == ("available", 0, [])
    assert worker.stop() == 0


def test_shutdown_waits_for_a_slow_hook_no_longer_than_the_grace(start_worker):
    from testproject.testjobs.jobs import AccSlowHooked

    job = awa_django.enqueue(AccSlowHooked())
    worker = start_worker("--queue", "acc=1", "--shutdown-grace", "2")
    wait_until(
        HookCall.objects.filter(job_id=job.id, event="Completed").exists, what="hooks to start"
    )
    began = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0  # the job finished: a clean exit
    assert time.monotonic() - began < 2 + 5  # the 60 s hook gets the grace, not more
    assert "lifecycle events not delivered to their hooks" in worker.output()
