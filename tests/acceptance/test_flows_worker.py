"""Flows under crashes, with real worker processes (issue 29, "Show"): FLOWS flows of three
parents and one child drained by several workers while workers are SIGKILLed and
restarted, and while one worker is frozen past its heartbeat staleness so that the parent
it runs is rescued and run again elsewhere, its late outcome refused when it wakes.

The evidence is the database's own: an audit trigger, created by the test on the jobs
table, writes every state transition with a sequence number and the clock of the
statement that made it. A child's claim can only follow the commit of its last parent's
completion, so its `running` rows must come after every parent's `completed` row."""

from __future__ import annotations

import signal
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

import awa_django
from awa_django.storage.models import Job
from testproject.testjobs.jobs import AccFlowCallback, AccFlowChild, AccFlowParent

from .conftest import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

FLOWS = 1_000
PARENTS = 3
BATCH_FLOWS = 100  # flows whose parents form one batch (FLOWS / BATCH_FLOWS batches)
WORKERS = 3
SLOW_QUEUE = "acc-slow"  # the frozen worker's queue: it alone claims the slow parent

AUDIT = """
CREATE TABLE flow_audit (
    seq bigserial PRIMARY KEY,
    job_id bigint NOT NULL,
    kind text NOT NULL,
    old_state text,
    new_state text NOT NULL,
    run_lease bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION flow_audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO flow_audit (job_id, kind, old_state, new_state, run_lease)
    VALUES (NEW.id, NEW.kind,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.state END, NEW.state, NEW.run_lease);
    RETURN NULL;
END $$;
CREATE TRIGGER flow_audit_insert AFTER INSERT ON awa_jobs_hot
    FOR EACH ROW EXECUTE FUNCTION flow_audit_write();
CREATE TRIGGER flow_audit_update AFTER UPDATE OF state ON awa_jobs_hot
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION flow_audit_write();
"""
DROP_AUDIT = """
DROP TRIGGER IF EXISTS flow_audit_insert ON awa_jobs_hot;
DROP TRIGGER IF EXISTS flow_audit_update ON awa_jobs_hot;
DROP FUNCTION IF EXISTS flow_audit_write();
DROP TABLE IF EXISTS flow_audit;
"""


@pytest.fixture
def audit() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(DROP_AUDIT)
        cursor.execute(AUDIT)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(DROP_AUDIT)


def audit_rows() -> list[tuple[int, int, str, str | None, str, int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, job_id, kind, old_state, new_state, run_lease FROM flow_audit ORDER BY seq"
        )
        return list(cursor.fetchall())


def enqueue_flows() -> tuple[dict[int, list[int]], list[int], int]:
    """FLOWS flows, the parents of each BATCH_FLOWS flows in one batch whose on_complete
    callback is an AccFlowCallback; one parent of the first flow is slow and on the slow
    queue. Returns ({child: [parents]}, [batch ids], the slow parent's id)."""
    flows: dict[int, list[int]] = {}
    batches: list[int] = []
    with transaction.atomic():
        for first in range(0, FLOWS, BATCH_FLOWS):
            members = [
                AccFlowParent(n=PARENTS * flow + k)
                for flow in range(first, first + BATCH_FLOWS)
                for k in range(PARENTS)
            ]
            made = awa_django.batch(members, on_complete=AccFlowCallback(batch=first))
            batches.append(made.id)
            ids = [job.id for job in made.jobs]
            for i, flow in enumerate(range(first, first + BATCH_FLOWS)):
                parents = ids[PARENTS * i : PARENTS * (i + 1)]
                child = awa_django.enqueue(AccFlowChild(flow=flow), after=parents)
                flows[child.id] = parents
        slow = awa_django.enqueue(AccFlowParent(n=-1, seconds=1.5), queue=SLOW_QUEUE)
        child = awa_django.enqueue(AccFlowChild(flow=-1, parents=1), after=[slow])
        flows[child.id] = [slow.id]
    return flows, batches, slow.id


def rescued(job_id: int) -> bool:
    return any("heartbeat stale" in e["error"] for e in Job.objects.get(id=job_id).errors)


def completed_share(ids: list[int]) -> float:
    return Job.objects.filter(id__in=ids, state="completed").count() / len(ids)


def test_every_child_runs_once_after_its_last_parent_while_workers_crash(
    start_worker: Any, audit: None
) -> None:
    flows, batches, slow = enqueue_flows()
    parents = [p for ps in flows.values() for p in ps]
    workers = [start_worker("--queue", "acc=10") for _ in range(WORKERS)]
    frozen = start_worker("--queue", f"{SLOW_QUEUE}=1", "--worker-id", "frozen")

    # The slow parent's attempt goes stale: its worker is frozen mid-handler, rescued by
    # the others' leader, the parent runs again on a fresh worker of the slow queue, and
    # the frozen worker's late outcome is refused when it wakes.
    wait_until(lambda: Job.objects.get(id=slow).state == "running", what="the slow parent")
    frozen.signal(signal.SIGSTOP)
    for step, share in enumerate((0.2, 0.4, 0.6)):
        wait_until(lambda s=share: completed_share(parents) >= s, timeout=60, what=f"{share}")
        workers[step].kill()  # SIGKILL mid-drain, then a fresh process in its place
        workers[step] = start_worker("--queue", "acc=10")
    wait_until(lambda: rescued(slow), timeout=30, what="the slow parent's rescue")
    start_worker("--queue", f"{SLOW_QUEUE}=1", "--worker-id", "stand-in")
    wait_until(lambda: Job.objects.get(id=slow).state == "completed", what="its second run")
    frozen.signal(signal.SIGCONT)
    wait_until(lambda: "is stale" in frozen.output(), timeout=30, what="the refused outcome")

    everything = [*flows, *parents]
    wait_until(
        lambda: not Job.objects.exclude(state="completed").exists(),
        timeout=120,
        what="every flow and callback completed",
    )
    assert Job.objects.filter(id__in=everything, state="completed").count() == len(everything)
    rows = audit_rows()
    check_children(flows, rows)
    check_stale_parent(slow, rows)
    check_callbacks(batches, rows)
    for worker in workers:
        assert worker.stop() == 0


def check_children(flows: dict[int, list[int]], rows: list[Any]) -> None:
    """Each child: never available or running before its last parent's completion; one
    completion; a claim per attempt (more than one only after a rescue of the child)."""
    completed_at: dict[int, int] = {}
    claims: defaultdict[int, list[int]] = defaultdict(list)
    available_at: dict[int, int] = {}
    for seq, job_id, _, old, new, _ in rows:
        if new == "completed":
            assert job_id not in completed_at, f"job {job_id} completed twice"
            completed_at[job_id] = seq
        elif new == "running":
            claims[job_id].append(seq)
        elif new == "available" and old == "waiting_parents":
            available_at.setdefault(job_id, seq)
    for child, parents in flows.items():
        last_parent = max(completed_at[p] for p in parents)
        assert available_at[child] > last_parent, f"child {child} made available early"
        assert claims[child] and min(claims[child]) > last_parent, f"child {child} ran early"
        job = Job.objects.get(id=child)
        assert len(claims[child]) == job.attempt, (child, claims[child], job.attempt)
        if job.attempt > 1:  # a second run only after its first attempt was rescued
            assert all("heartbeat stale" in e["error"] for e in job.errors), job.errors
    twice = Counter(job_id for job_id, seqs in claims.items() if len(seqs) > 1)
    print(f"claims: {sum(map(len, claims.values()))}; rescued and run again: {len(twice)}")


def check_stale_parent(slow: int, rows: list[Any]) -> None:
    """The slow parent ran twice (rescued while its handler slept) and completed once, with
    the second attempt's lease: the late outcome of the first changed nothing."""
    mine = [(new, lease) for _, job_id, _, _, new, lease in rows if job_id == slow]
    assert [new for new, _ in mine if new == "running"] == ["running", "running"], mine
    assert [lease for new, lease in mine if new == "completed"] == [mine[-1][1]], mine
    assert mine[-1][0] == "completed"


def check_callbacks(batches: list[int], rows: list[Any]) -> None:
    """One callback job per batch, enqueued once and completed once."""
    callbacks = [job_id for _, job_id, kind, old, _, _ in rows
                 if kind == "acc_flow_callback" and old is None]  # fmt: skip
    assert len(callbacks) == len(batches) == len(set(callbacks))
    done = Counter(job_id for _, job_id, kind, _, new, _ in rows if new == "completed")
    assert all(done[c] == 1 for c in callbacks)
    args = Job.objects.filter(id__in=callbacks).values_list("args", flat=True)
    assert sorted(a["batch"] for a in args) == list(range(0, FLOWS, BATCH_FLOWS))
