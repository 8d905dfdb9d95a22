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
from functools import partial
from typing import Any, NamedTuple

import pytest
from django.db import connection, transaction

import awa_django
from awa_django.client import Client
from awa_django.storage.models import Job
from testproject.testjobs.jobs import AccFlowCallback, AccFlowChild, AccFlowParent
from tests.waiting import wait_until

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
    xact bigint NOT NULL DEFAULT txid_current(),
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


class Move(NamedTuple):
    """One audited transition (a row's insert has no `old` state)."""

    seq: int
    job_id: int
    kind: str
    old: str | None
    new: str
    run_lease: int
    xact: int


def audit_rows() -> list[Move]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, job_id, kind, old_state, new_state, run_lease, xact"
            " FROM flow_audit ORDER BY seq"
        )
        return [Move(*row) for row in cursor.fetchall()]


def enqueue_flows() -> tuple[dict[int, list[int]], dict[int, list[int]], int]:
    """FLOWS flows, the parents of each BATCH_FLOWS flows in one batch whose on_complete
    callback is an AccFlowCallback, and one more flow whose one parent is slow and on the
    slow queue. Returns ({child: its parents}, {callback: its batch's members}, the slow
    parent's id)."""
    flows: dict[int, list[int]] = {}
    callbacks: dict[int, list[int]] = {}
    client = Client()
    with transaction.atomic():
        for first in range(0, FLOWS, BATCH_FLOWS):
            members = [
                AccFlowParent(n=PARENTS * flow + k)
                for flow in range(first, first + BATCH_FLOWS)
                for k in range(PARENTS)
            ]
            batch = awa_django.batch(members, on_complete=AccFlowCallback(batch=first))
            ids = client.batch_members(batch)  # ascending: the order they were given in
            callback = client.batch_progress(batch).on_complete_id
            assert callback is not None
            callbacks[callback] = ids
            for i, flow in enumerate(range(first, first + BATCH_FLOWS)):
                parents = ids[PARENTS * i : PARENTS * (i + 1)]
                child = awa_django.enqueue(AccFlowChild(flow=flow), after=parents)
                flows[child.id] = parents
        slow = awa_django.enqueue(AccFlowParent(n=-1, seconds=1.5), queue=SLOW_QUEUE)
        child = awa_django.enqueue(AccFlowChild(flow=-1, parents=1), after=[slow])
        flows[child.id] = [slow.id]
    return flows, callbacks, slow.id


def running_on(job_id: int) -> str | None:
    """The worker id of the job's attempt, once it runs."""
    job = Job.objects.get(id=job_id)
    return job.attempted_by[-1] if job.state == "running" else None


def rescued(job_id: int) -> bool:
    return any("heartbeat stale" in e["error"] for e in Job.objects.get(id=job_id).errors)


def completed_at_least(ids: list[int], share: float) -> bool:
    return Job.objects.filter(id__in=ids, state="completed").count() >= share * len(ids)


def test_every_child_runs_once_after_its_last_parent_while_workers_crash(
    start_worker: Any, audit: None
) -> None:
    flows, callbacks, slow = enqueue_flows()
    parents = [p for ps in flows.values() for p in ps]
    workers = [start_worker("--queue", "acc=10") for _ in range(WORKERS)]
    slow_workers = {
        name: start_worker("--queue", f"{SLOW_QUEUE}=1", "--worker-id", name)
        for name in ("slow-a", "slow-b")
    }

    # The slow parent's attempt goes stale: the worker running it is frozen mid-handler
    # (SIGSTOP) past the heartbeat staleness, the leader rescues it, the other worker of
    # the slow queue runs it again, and the frozen worker's late outcome is refused when it
    # wakes.
    holder = wait_until(lambda: running_on(slow), what="the slow parent to start")
    frozen = slow_workers[holder]
    frozen.signal(signal.SIGSTOP)
    for step, share in enumerate((0.2, 0.4, 0.6)):
        wait_until(partial(completed_at_least, parents, share), timeout=60, what=f"{share}")
        workers[step].kill()  # SIGKILL mid-drain, then a fresh process in its place
        workers[step] = start_worker("--queue", "acc=10")
    wait_until(
        lambda: Job.objects.get(id=slow).state == "completed", timeout=40, what="its second run"
    )
    assert rescued(slow)
    frozen.signal(signal.SIGCONT)
    wait_until(lambda: "is stale" in frozen.output(), timeout=30, what="the refused outcome")

    wait_until(
        lambda: not Job.objects.exclude(state="completed").exists(),
        timeout=120,
        what="every flow and callback completed",
    )
    everything = {*flows, *parents, *callbacks}
    assert Job.objects.filter(state="completed").count() == len(everything)
    rows = audit_rows()
    check_children({**flows, **callbacks}, rows)
    check_stale_parent(slow, rows)
    check_callbacks(callbacks, rows)
    for worker in [*workers, *slow_workers.values()]:
        assert worker.stop() == 0


def check_children(flows: dict[int, list[int]], rows: list[Move]) -> None:
    """Each child: made available in the transaction of its last parent's completion (an
    AFTER trigger of that statement: its audit row may come first, in the same
    transaction), claimed only after it, completed once; a claim per attempt, so a second
    run only after the child's own attempt was rescued."""
    completed: dict[int, Move] = {}
    claims: defaultdict[int, list[int]] = defaultdict(list)
    released: defaultdict[int, list[Move]] = defaultdict(list)
    for move in rows:
        if move.new == "completed":
            assert move.job_id not in completed, f"job {move.job_id} completed twice"
            completed[move.job_id] = move
        elif move.new == "running":
            claims[move.job_id].append(move.seq)
        elif move.old == "waiting_parents":
            released[move.job_id].append(move)
    for child, parents in flows.items():
        last = max((completed[p] for p in parents), key=lambda m: m.seq)
        [release] = released[child]  # left waiting once, never put back
        assert (release.new, release.xact) == ("available", last.xact), (child, release, last)
        assert claims[child] and min(claims[child]) > last.seq, f"child {child} ran early"
        job = Job.objects.get(id=child)
        assert len(claims[child]) == job.attempt, (child, claims[child], job.attempt)
        if job.attempt > 1:
            assert all("heartbeat stale" in e["error"] for e in job.errors), job.errors


def check_stale_parent(slow: int, rows: list[Move]) -> None:
    """The slow parent ran twice (rescued while its handler slept) and completed once, with
    the second attempt's lease: the late outcome of the first changed nothing."""
    mine = [m for m in rows if m.job_id == slow]
    claims = [m.run_lease for m in mine if m.new == "running"]
    assert len(set(claims)) == len(claims) == 2, mine
    assert [m.run_lease for m in mine if m.new == "completed"] == claims[-1:], mine
    assert mine[-1].new == "completed"


def check_callbacks(batches: dict[int, list[int]], rows: list[Move]) -> None:
    """One callback job per batch, inserted once, released by its last member (checked
    with the children) and completed once."""
    inserted = [m.job_id for m in rows if m.kind == "acc_flow_callback" and m.old is None]
    assert sorted(inserted) == sorted(batches)
    done = Counter(m.job_id for m in rows if m.new == "completed")
    assert all(done[c] == 1 for c in inserted)
    args = Job.objects.filter(id__in=inserted).values_list("args", flat=True)
    assert sorted(a["batch"] for a in args) == list(range(0, FLOWS, BATCH_FLOWS))
