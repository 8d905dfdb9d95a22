"""Bulk operations (decision 018) on real PostgreSQL: `Client.bulk_*`, `drain_queue`,
`retry_failed`, `discard_failed`: what each touches and never touches, chunking and
progress, unique-key conflicts, rows a worker holds, resuming a stopped operation, and the
plans of the chunk statements.

Transactional tests: each chunk commits on its own, and Cancelled fires after it does.
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
import types
from typing import Any

import psycopg
import pytest
from django.utils import timezone

from awa_django.bulk import BulkAction, BulkProgress, JobFilter
from awa_django.client import Client
from awa_django.client import bulk as bulk_module
from awa_django.events import Cancelled
from awa_django.exceptions import BulkOperationNotFound, InvalidJobFilter, InvalidQueueName
from awa_django.storage.models import ActiveLease, BulkOperation, Job
from awa_django.storage.sql import bulk as bulk_sql
from awa_django.storage.sql.bulk import Window
from awa_django.testing import capture_events
from awa_django.worker.database import connection_kwargs
from tests.factories import JobFactory as BaseJobFactory
from tests.integration.sql_helpers import big_table, explain
from tests.listening import Listener

pytestmark = pytest.mark.django_db(transaction=True)

Q = "core-bulk"
OTHER = "core-bulk-other"
ALL_STATES = (
    "scheduled",
    "available",
    "running",
    "waiting_external",
    "retryable",
    "completed",
    "failed",
    "cancelled",
)
__all__ = ["big_table"]  # the fixture, imported for the plan tests


class JobFactory(BaseJobFactory):
    kind = "core_bulk"
    queue = Q


def one_of_each(queue: str = Q) -> dict[str, Job]:
    jobs = {state: JobFactory(queue=queue, state=state) for state in ALL_STATES}
    ActiveLease.objects.create(job_id=jobs["running"].pk, run_lease=0, queue=queue, worker_id="w")
    return jobs


def states(jobs: dict[str, Job]) -> dict[str, str]:
    return {name: Job.objects.get(pk=job.pk).state for name, job in jobs.items()}


def test_drain_queue_cancels_every_waiting_job_of_the_queue_and_nothing_else() -> None:
    jobs, elsewhere = one_of_each(), one_of_each(OTHER)
    with capture_events() as events:
        progress = Client().drain_queue(Q)
    waiting = {"scheduled", "available", "waiting_external", "retryable"}
    assert states(jobs) == {s: "cancelled" if s in waiting else s for s in ALL_STATES}
    assert states(elsewhere) == {s: s for s in ALL_STATES}
    assert (progress.done, progress.matched, progress.total_estimate) == (4, 4, 4)
    assert progress.finished and progress.skipped == 0
    cancelled = [e for e in events.events if isinstance(e, Cancelled)]
    assert sorted(e.job.id for e in cancelled) == sorted(jobs[s].pk for s in waiting)


def test_bulk_cancel_takes_running_jobs_as_cancel_does() -> None:
    jobs = one_of_each()
    progress = Client().bulk_cancel(JobFilter(queue=Q, states=("running",)))
    assert progress.done == 1
    assert states(jobs)["running"] == "cancelled"
    assert not ActiveLease.objects.filter(job_id=jobs["running"].pk).exists()


def test_retry_failed_retries_failed_jobs_of_the_kind_and_queue_only() -> None:
    jobs = one_of_each()
    other_kind = JobFactory(state="failed", kind="core_bulk_other")
    other_queue = JobFactory(state="failed", queue=OTHER)
    Job.objects.filter(pk=jobs["failed"].pk).update(attempt=25, original_priority=4)
    progress = Client().retry_failed(kind="core_bulk", queue=Q)
    assert progress.done == 1
    retried = Job.objects.get(pk=jobs["failed"].pk)
    assert (retried.state, retried.attempt, retried.original_priority) == ("available", 0, None)
    assert retried.priority == 4  # the enqueued priority, were it aged
    assert states(jobs)["cancelled"] == "cancelled"
    assert {other_kind.state, other_queue.state} == {"failed"}
    assert Job.objects.filter(pk__in=[other_kind.pk, other_queue.pk], state="failed").count() == 2


def test_bulk_retry_wakes_each_queue_once() -> None:
    JobFactory.create_batch(3, state="failed")
    listener = Listener("awa:" + Q)
    try:
        Client().bulk_retry(JobFilter(queue=Q))
        assert listener.next() is not None
        listener.assert_nothing_pending("awa:" + Q)
    finally:
        listener.close()


def test_discard_failed_deletes_failed_jobs_only() -> None:
    jobs = one_of_each()
    progress = Client().discard_failed(queue=Q)
    assert progress.done == 1
    assert not Job.objects.filter(pk=jobs["failed"].pk).exists()
    assert Job.objects.filter(queue=Q).count() == len(ALL_STATES) - 1


def test_set_priority_and_move_queue_never_touch_running_or_terminal_jobs() -> None:
    jobs = one_of_each()
    Job.objects.filter(pk=jobs["available"].pk).update(priority=1, original_priority=4)
    client = Client()
    assert client.bulk_set_priority(JobFilter(queue=Q), 3).done == 4
    assert client.bulk_move_queue(JobFilter(queue=Q), OTHER).done == 4
    rows = {name: Job.objects.get(pk=job.pk) for name, job in jobs.items()}
    waiting = {"scheduled", "available", "waiting_external", "retryable"}
    for name, row in rows.items():
        assert (row.priority, row.queue) == ((3, OTHER) if name in waiting else (2, Q)), name
    assert rows["available"].original_priority is None  # the operator's choice wins


def test_move_queue_wakes_the_destination() -> None:
    JobFactory(state="available")
    listener = Listener("awa:" + OTHER)
    try:
        Client().bulk_move_queue(JobFilter(queue=Q), OTHER)
        assert listener.next() is not None
    finally:
        listener.close()


def test_filters_narrow_by_tags_and_time_ranges() -> None:
    now = timezone.now()
    tagged = JobFactory(state="failed", tags=["a", "b"])
    JobFactory(state="failed", tags=["a"])
    old = JobFactory(state="failed", finalized_at=now - dt.timedelta(days=2))
    JobFactory(state="failed", finalized_at=now)
    client = Client()
    assert client.bulk_count("retry", JobFilter(queue=Q, tags=("a", "b"))) == 1
    day_ago = now - dt.timedelta(days=1)
    assert client.bulk_count("retry", JobFilter(queue=Q, finalized_before=day_ago)) == 1
    assert client.bulk_count("retry", JobFilter(queue=Q, created_after=now + dt.timedelta(1))) == 0
    progress = client.bulk_retry(JobFilter(queue=Q, tags=("b",)))
    assert progress.done == 1 and Job.objects.get(pk=tagged.pk).state == "available"
    client.bulk_retry(JobFilter(queue=Q, finalized_before=day_ago))
    assert Job.objects.get(pk=old.pk).state == "available"


def test_chunks_report_progress_after_each_commit() -> None:
    JobFactory.create_batch(7, state="failed")
    seen: list[BulkProgress] = []

    def on_progress(progress: BulkProgress) -> None:
        row = BulkOperation.objects.get(pk=progress.id)  # committed before it is reported
        assert (row.done, row.cursor) == (progress.done, progress.cursor)
        seen.append(progress)

    final = Client().retry_failed(queue=Q, chunk_size=3, on_progress=on_progress)
    assert [p.done for p in seen] == [3, 6, 7]
    assert [p.finished for p in seen] == [False, False, True]
    assert final == seen[-1] and final.total_estimate == 7 and final.fraction == 1.0


class Stop(Exception):
    pass


def test_a_stopped_operation_resumes_after_its_last_chunk() -> None:
    jobs = JobFactory.create_batch(5, state="failed")
    client = Client()

    def stop_after_the_first_chunk(progress: BulkProgress) -> None:
        raise Stop(progress.id)

    with pytest.raises(Stop) as stopped:
        client.retry_failed(queue=Q, chunk_size=2, on_progress=stop_after_the_first_chunk)
    operation_id = stopped.value.args[0]
    assert Job.objects.filter(queue=Q, state="available").count() == 2
    assert client.bulk_operation(operation_id).state == "running"
    Job.objects.filter(pk=jobs[0].pk).update(state="failed")  # behind the cursor: not redone
    final = client.resume_bulk(operation_id)
    assert (final.done, final.matched, final.finished) == (5, 5, True)
    assert Job.objects.filter(queue=Q, state="available").count() == 4
    assert client.resume_bulk(operation_id) == final  # a finished one is left as it is
    assert client.bulk_operations()[0] == final


def test_max_per_second_waits_between_chunks_for_what_each_looked_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    JobFactory.create_batch(5, state="failed")
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)  # record, do not wait
    progress = Client().retry_failed(queue=Q, chunk_size=2, max_per_second=1)
    assert progress.done == 5
    # Two full chunks of 2 jobs at 1 job/s: about 2 s after each, less the chunk's own time;
    # none after the last one.
    assert len(waits) == 2 and all(1.0 < w <= 2.0 for w in waits), waits


def test_chunks_take_at_most_the_busy_fraction_of_the_wall_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    JobFactory.create_batch(5, state="failed")
    clock, waits = itertools.count(step=0.1), list[float]()  # each reading 0.1 s later
    fake = types.SimpleNamespace(monotonic=lambda: next(clock), sleep=waits.append)
    monkeypatch.setattr(bulk_module, "time", fake)
    assert Client().retry_failed(queue=Q, chunk_size=2).done == 5
    # A chunk "takes" 0.1 s; at the default 0.25 busy, 0.3 s of pause follows it.
    assert waits == [pytest.approx(0.3), pytest.approx(0.3)]
    waits.clear()
    JobFactory.create_batch(3, state="failed")
    assert Client().retry_failed(queue=Q, chunk_size=2, busy_fraction=1.0).done == 3
    assert waits == []  # 1.0: no pause at all


def test_resume_of_an_unknown_operation_is_a_clear_error() -> None:
    with pytest.raises(BulkOperationNotFound):
        Client().resume_bulk(10**12)


def test_a_row_a_worker_holds_is_skipped_not_waited_for() -> None:
    held, free = JobFactory(state="failed"), JobFactory(state="failed")
    with (
        psycopg.connect(**connection_kwargs("default", "awa-test-lock")) as other,
        other.transaction(),
    ):
        other.execute("SELECT 1 FROM awa_jobs_hot WHERE id = %s FOR UPDATE", [held.pk])
        progress = Client().retry_failed(queue=Q)
    assert (progress.done, progress.skipped, progress.matched) == (1, 1, 2)
    assert Job.objects.get(pk=held.pk).state == "failed"
    assert Job.objects.get(pk=free.pk).state == "available"


def keyed(key: bytes, state: str) -> Job:
    # Unique in every live state (available, running, ...) but not once failed.
    return JobFactory(state=state, unique_key=key, unique_states="11101001")


def test_a_retry_whose_unique_key_is_held_is_skipped_and_counted() -> None:
    failed = keyed(b"k1", "failed")
    keyed(b"k1", "available")  # the live holder
    twin_a, twin_b = keyed(b"k2", "failed"), keyed(b"k2", "failed")
    plain = JobFactory(state="failed")
    progress = Client().retry_failed(queue=Q)
    assert (progress.done, progress.conflicts, progress.skipped) == (2, 2, 2)
    assert Job.objects.get(pk=failed.pk).state == "failed"
    assert [Job.objects.get(pk=j.pk).state for j in (twin_a, twin_b)] == ["available", "failed"]
    assert Job.objects.get(pk=plain.pk).state == "available"


def test_skip_keyed_leaves_every_keyed_row_of_the_chunk() -> None:
    keyed(b"k3", "failed")
    plain = JobFactory(state="failed")
    window = Window(JobFilter(queue=Q), ("failed",), 0, 10)
    outcome = bulk_sql.job_bulk_retry(window=window, skip_keyed=True).run("default")
    assert (outcome.done, outcome.conflicts, outcome.last_id) == (1, 1, plain.pk)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: JobFilter(states=("done",)), InvalidJobFilter),
        (lambda: JobFilter(created_after=dt.datetime(2026, 1, 1)), InvalidJobFilter),
        (lambda: JobFilter(tags="a"), InvalidJobFilter),  # type: ignore[arg-type]
        (lambda: JobFilter(queue="no spaces"), InvalidQueueName),
        (lambda: Client().bulk_retry(JobFilter(states=("completed",))), InvalidJobFilter),
        (lambda: Client().bulk_set_priority(JobFilter(), 500), InvalidJobFilter),
        (lambda: Client().bulk_move_queue(JobFilter(), "bad name"), InvalidQueueName),
        (lambda: Client().bulk_cancel(JobFilter(), chunk_size=0), InvalidJobFilter),
        (lambda: Client().drain_queue(Q, max_per_second=0), InvalidJobFilter),
        (lambda: Client().retry_failed(queue=Q, busy_fraction=0), InvalidJobFilter),
        (lambda: Client().retry_failed(queue=Q, busy_fraction=1.5), InvalidJobFilter),
        (lambda: Client().retry_failed(queue=Q, busy_fraction=True), InvalidJobFilter),
        (lambda: Client().bulk_operation("abc"), BulkOperationNotFound),  # type: ignore[arg-type]
        (lambda: Client().resume_bulk("1"), BulkOperationNotFound),  # type: ignore[arg-type]
        (lambda: Client().bulk_operation(2**70), BulkOperationNotFound),
    ],
)
def test_bad_input_is_a_typed_error_before_anything_changes(make: Any, error: type) -> None:
    JobFactory(state="failed")
    with pytest.raises(error):
        make()
    assert Job.objects.filter(state="failed").count() == 1
    assert not BulkOperation.objects.exists()


def test_bulk_count_is_what_the_action_would_look_at() -> None:
    one_of_each()
    client = Client()
    assert client.bulk_count(BulkAction.CANCEL, JobFilter(queue=Q)) == 5
    assert (
        client.bulk_count("retry", JobFilter(queue=Q)) == 4
    )  # failed, cancelled, waiting_external, retryable
    assert client.bulk_count("discard", JobFilter(queue=Q)) == 1


def test_bulk_operation_prune_drops_finished_operations_past_retention() -> None:
    client = Client()
    old = client.retry_failed(queue=Q)
    BulkOperation.objects.filter(pk=old.id).update(
        finished_at=timezone.now() - dt.timedelta(days=5)
    )
    recent = client.retry_failed(queue=Q)
    running = BulkOperation.objects.create(action="retry", state="running", chunk_size=10)
    pruned = bulk_sql.bulk_operation_prune(older_than_seconds=3 * 86400, limit=10).run("default")
    assert pruned == 1
    assert set(BulkOperation.objects.values_list("id", flat=True)) == {recent.id, running.id}


@pytest.mark.usefixtures("big_table")
def test_retry_failed_chunk_reads_the_state_index_from_the_cursor() -> None:
    window = Window(JobFilter(queue="q3"), ("failed",), 0, 2000)
    plan = explain(bulk_sql.job_bulk_retry, window=window, skip_keyed=False)
    assert "Seq Scan on awa_jobs_hot" not in plan, plan
    assert "awa_jobs_state_id_part_idx" in plan or "awa_jobs_queue_state_part_idx" in plan, plan


@pytest.mark.usefixtures("big_table")
@pytest.mark.parametrize(
    "statement",
    [bulk_sql.job_bulk_cancel, bulk_sql.job_bulk_discard],
)
def test_chunk_statements_never_scan_the_table(statement: Any) -> None:
    states = ("failed",) if statement is bulk_sql.job_bulk_discard else ("available", "running")
    window = Window(JobFilter(kind="core_explain"), states, 0, 2000)
    plan = explain(statement, window=window)
    assert "Seq Scan on awa_jobs_hot" not in plan, plan
