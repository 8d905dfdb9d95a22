"""Jobs the acceptance tests run in real worker processes. Each records its execution so
tests can count attempts across processes."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import connection

import awa_django
from awa_django import JobContext


def record(job: JobContext[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testjobs_execution (job_id, run_lease, pid, at) "
            "VALUES (%s, %s, %s, now())",
            [job.id, job.run_lease, os.getpid()],
        )


@dataclass
class AccNoop:
    n: int = 0


@dataclass
class AccSleep:
    seconds: float


@dataclass
class AccBlock:
    """Sleeps, ignoring the cooperative cancel flag (a stuck handler)."""

    seconds: float


@awa_django.job(AccNoop, queue="acc")
def acc_noop(job: JobContext[AccNoop]) -> None:
    record(job)


@awa_django.job(AccSleep, queue="acc")
def acc_sleep(job: JobContext[AccSleep]) -> None:
    record(job)
    deadline = time.monotonic() + job.args.seconds
    while time.monotonic() < deadline and not job.is_cancelled():
        time.sleep(0.02)


@awa_django.job(AccBlock, queue="acc")
def acc_block(job: JobContext[AccBlock]) -> None:
    record(job)
    time.sleep(job.args.seconds)


@dataclass
class PerfNoop:
    n: int = 0


@awa_django.job(PerfNoop, queue="perf")
def perf_noop(job: JobContext[PerfNoop]) -> None:
    """A sync no-op, for quick throughput checks."""


@dataclass
class PerfAsyncNoop:
    n: int = 0


@awa_django.job(PerfAsyncNoop, queue="perf")
async def perf_async_noop(job: JobContext[PerfAsyncNoop]) -> None:
    """An async no-op, for quick throughput checks."""


@dataclass
class AccPark:
    """Registers a callback and parks; with `hold`, first waits until something outside
    resolves the callback while the job is still running (the early-resolution race)."""

    hold: bool = False
    timeout: float = 600


@awa_django.job(AccPark, queue="acc")
def acc_park(job: JobContext[AccPark]) -> awa_django.WaitForCallback:
    record(job)
    token = job.register_callback(timeout=job.args.timeout)
    if job.args.hold:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _state(job.id) == "running":
            time.sleep(0.02)
    return awa_django.WaitForCallback(token)


@dataclass
class AccWaitInPlace:
    pass


@awa_django.job(AccWaitInPlace, queue="acc")
def acc_wait_in_place(job: JobContext[AccWaitInPlace]) -> None:
    record(job)
    token = job.register_callback(timeout=600)
    job.result = {"payload": job.wait_for_callback(token)}


@dataclass
class AccAsyncWaitInPlace:
    pass


@awa_django.job(AccAsyncWaitInPlace, queue="acc")
async def acc_async_wait_in_place(job: JobContext[AccAsyncWaitInPlace]) -> None:
    token = await job.aregister_callback(timeout=600)
    job.result = {"payload": await job.await_for_callback(token)}


def _state(job_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT state FROM awa_jobs_hot WHERE id = %s", [job_id])
        return cursor.fetchone()[0]


@dataclass
class AccExit:
    code: int = 3


@awa_django.job(AccExit, queue="acc")
def acc_exit(job: JobContext[AccExit]) -> None:
    record(job)
    sys.exit(job.args.code)


@dataclass
class AccSlowHooked:
    """A no-op whose Completed hook sleeps (see apps.py): shutdown must not wait for it."""


@awa_django.job(AccSlowHooked, queue="acc")
def acc_slow_hooked(job: JobContext[AccSlowHooked]) -> None:
    record(job)


# -- hostile conditions (tests/acceptance/test_hostile_worker.py) ---------------------------


@dataclass
class AccResult:
    """Sets `job.result`: `{"n": n}`, or `result` when given, or a lone surrogate (a value
    the codec refuses) with `lone_surrogate`; returns `delay` seconds after it started."""

    n: int = 0
    result: str | None = None
    lone_surrogate: bool = False
    delay: float = 0.0


@awa_django.job(AccResult, queue="acc")
def acc_result(job: JobContext[AccResult]) -> None:
    record(job)
    time.sleep(job.args.delay)
    if job.args.lone_surrogate:
        job.result = "\ud800"
    elif job.args.result is not None:
        job.result = job.args.result
    else:
        job.result = {"n": job.args.n}


@dataclass
class AccUnstorableError:
    """Raises an exception whose text PostgreSQL cannot store as is (a lone surrogate and
    a NUL): the error entry must be repaired, not refused."""


@awa_django.job(AccUnstorableError, queue="acc")
def acc_unstorable_error(job: JobContext[AccUnstorableError]) -> None:
    record(job)
    raise RuntimeError("boom \ud800 \x00")


@dataclass
class AccHooked:
    """A no-op whose Completed hook writes one `HookCall` row (see apps.py), after
    sleeping `hook_seconds`."""

    n: int = 0
    hook_seconds: float = 0.0


@awa_django.job(AccHooked, queue="acc")
def acc_hooked(job: JobContext[AccHooked]) -> None:
    """No execution row: the 10,000-job test counts hook rows, and keeps its time down."""


@dataclass
class AccDeadFail:
    """Always raises: on the dead-letter queue `acc-dead` it ends among the dead letters."""

    n: int = 0


@awa_django.job(AccDeadFail, queue="acc-dead", max_attempts=2)
def acc_dead_fail(job: JobContext[AccDeadFail]) -> None:
    record(job)
    raise RuntimeError(f"acc_dead_fail {job.args.n} attempt {job.attempt}")


# A rolling deploy: a worker started with AWA_TEST_WITHOUT_KINDS=acc_rolling in its
# environment is an "old" worker that has no handler for this kind.
WITHOUT_KINDS = set(os.environ.get("AWA_TEST_WITHOUT_KINDS", "").split(","))


@dataclass
class AccRolling:
    n: int = 0


def acc_rolling(job: JobContext[AccRolling]) -> None:
    record(job)


if "acc_rolling" not in WITHOUT_KINDS:
    awa_django.job(AccRolling, queue="acc")(acc_rolling)


# Schedules firing every second, one per missed-fire policy, declared only in workers
# started with AWA_TEST_CRON=1 (the cron failover test), so they never fire in any other test.
CRON_EVERY_SECOND = "acc-every-second"
CRON_EVERY_SECOND_COALESCE = "acc-every-second-coalesce"
if os.environ.get("AWA_TEST_CRON") == "1":
    awa_django.periodic(
        CRON_EVERY_SECOND, "* * * * * *", AccNoop(n=-1), missed_fire_policy="catch_up"
    )
    awa_django.periodic(CRON_EVERY_SECOND_COALESCE, "* * * * * *", AccNoop(n=-2))


# -- exactly-once effects (tests/acceptance/test_atomic_worker.py) --------------------------


def record_outside(job: JobContext[Any]) -> None:
    """`record`, committed at once on another thread's connection: evidence that outlives
    the rollback of an atomic handler's transaction."""

    def write() -> None:
        try:
            record(job)
        finally:
            connection.close()

    thread = threading.Thread(target=write)
    thread.start()
    thread.join()


@dataclass
class AccAtomicInvoice:
    """Writes an Invoice row, records the execution outside its transaction, sleeps
    `seconds` (cooperatively), then raises if `fail`. Its completion enqueues
    `AccNoop(order_id)` (a follow-up registered in apps.py)."""

    order_id: int
    seconds: float = 0.0
    fail: bool = False


@awa_django.job(AccAtomicInvoice, queue="acc", atomic=True)
def acc_atomic_invoice(job: JobContext[AccAtomicInvoice]) -> None:
    from .models import Invoice

    Invoice.objects.create(
        order_id=job.args.order_id, job_id=job.id, run_lease=job.run_lease, pid=os.getpid()
    )
    record_outside(job)
    deadline = time.monotonic() + job.args.seconds
    while time.monotonic() < deadline and not job.is_cancelled():
        time.sleep(0.02)
    if job.args.fail:
        raise RuntimeError("failed after writing its invoice")


@dataclass
class AccFollowed:
    """A plain (not atomic) AccSleep whose completion enqueues `AccNoop(n)` (apps.py)."""

    n: int
    seconds: float = 0.0


@awa_django.job(AccFollowed, queue="acc")
def acc_followed(job: JobContext[AccFollowed]) -> None:
    record(job)
    deadline = time.monotonic() + job.args.seconds
    while time.monotonic() < deadline and not job.is_cancelled():
        time.sleep(0.02)


@dataclass
class AccOutcome:
    """Ends as asked (the metrics test's known workload): "complete", "fail" (terminal),
    "retry" (one retry, then completes) or "cancel"."""

    outcome: str
    n: int = 0


@awa_django.job(AccOutcome, queue="acc")
def acc_outcome(job: JobContext[AccOutcome]) -> Any:
    wanted = job.args.outcome
    if wanted == "fail":
        raise awa_django.TerminalError("asked to fail")
    if wanted == "retry" and job.attempt == 1:
        return awa_django.RetryAfter(0.05)
    if wanted == "cancel":
        return awa_django.Cancel("asked to cancel")
    return None


# -- per-key concurrency (tests/acceptance/test_concurrency_keys_worker.py) ---------------
@dataclass
class AccKeyed:
    """A job of concurrency key `key` (at most 2 at once) that runs `seconds`, recording
    when its handler starts and ends in the test's audit table (on the database clock)."""

    key: str
    seconds: float = 0.0


@dataclass
class AccKeyedSerial:
    """As AccKeyed, one at a time per key."""

    key: str
    seconds: float = 0.0


def _key_audit(job: JobContext[Any], phase: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO acc_keys_audit (key, job_id, phase) VALUES (%s, %s, %s)",
            [job.args.key, job.id, phase],
        )


def _run_keyed(job: JobContext[Any]) -> None:
    _key_audit(job, "start")
    deadline = time.monotonic() + job.args.seconds
    while time.monotonic() < deadline and not job.is_cancelled():
        time.sleep(0.01)
    _key_audit(job, "end")


@awa_django.job(AccKeyed, queue="acc-keys", concurrency_key=lambda a: a.key, max_in_flight=2)
def acc_keyed(job: JobContext[AccKeyed]) -> None:
    _run_keyed(job)


@awa_django.job(AccKeyedSerial, queue="acc-keys", concurrency_key=lambda a: a.key, max_in_flight=1)
def acc_keyed_serial(job: JobContext[AccKeyedSerial]) -> None:
    _run_keyed(job)


# -- flows under crashes (tests/acceptance/test_flows_worker.py) ----------------------------


@dataclass
class AccFlowParent:
    """One of a flow's parents: records its execution, sleeps `seconds` (ignoring the
    cancel flag, like a handler stuck in I/O), and returns `{"n": n}` as its result."""

    n: int
    seconds: float = 0.0


@awa_django.job(AccFlowParent, queue="acc")
def acc_flow_parent(job: JobContext[AccFlowParent]) -> None:
    record(job)
    time.sleep(job.args.seconds)
    job.result = {"n": job.args.n}


@dataclass
class AccFlowChild:
    """A flow's child: records its execution and fails for good unless it reads the
    results of all `parents` of its flow."""

    flow: int
    parents: int = 3


@awa_django.job(AccFlowChild, queue="acc")
def acc_flow_child(job: JobContext[AccFlowChild]) -> None:
    record(job)
    results = job.parent_results()
    if len(results) != job.args.parents:
        raise awa_django.TerminalError(f"read {len(results)} parent results: {results!r}")


@dataclass
class AccFlowCallback:
    """A batch's completion callback: records its execution."""

    batch: int


@awa_django.job(AccFlowCallback, queue="acc")
def acc_flow_callback(job: JobContext[AccFlowCallback]) -> None:
    record(job)
