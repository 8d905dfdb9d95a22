"""The dead-letter moves as statements (decision 016), on real PostgreSQL: the attempt's
guarded move, the rescue's and `fail_external`'s dead-letter branches, the retry back, the
move of failed jobs, pruning; each named statement of storage/sql/dead_letters.py has a
test named after it, and the hot ones an EXPLAIN.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import factory
import pytest
from django.db import connection
from django.utils import timezone

from awa_django.snapshot import JobSnapshot
from awa_django.storage.models import ActiveLease, DeadLetter, Job
from awa_django.storage.sql import Statement
from awa_django.storage.sql import callbacks as callbacks_sql
from awa_django.storage.sql import dead_letters as dead_letters_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.unique import UniqueOpts
from tests.factories import DeadLetterFactory
from tests.factories import JobFactory as BaseJobFactory

pytestmark = pytest.mark.django_db

Q = "dl-sql"
AGO = dt.timedelta(days=2)


class JobFactory(BaseJobFactory):
    kind = "dl_sql"
    queue = Q
    run_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=1))


def running(**fields: Any) -> JobSnapshot:
    """A job claimed by worker w1, with its lease."""
    job = JobFactory(**fields)
    claimed = jobs_sql.job_claim_many(
        lease_now=True, queue=job.queue, limit=100, worker_id="w1", deadline_seconds=0
    ).run("default")
    (row,) = [r for r in claimed if r.id == job.id]
    return row


def dead_letter(row: JobSnapshot, run_lease: int | None = None, **overrides: Any) -> Any:
    params: dict[str, Any] = {
        "id": row.id,
        "run_lease": row.run_lease if run_lease is None else run_lease,
        "reason": "terminal_error",
        "error": "boom",
        "error_type": "builtins.ValueError",
        "terminal": True,
        "progress": None,
        **overrides,
    }
    return dead_letters_sql.job_dead_letter_if_running(**params).run("default")


# -- job_dead_letter_if_running -----------------------------------------------------------
def test_job_dead_letter_if_running_moves_the_row_with_its_history_and_releases_the_lease():
    row = running(tags=["a"], metadata={"m": 1}, progress={"p": 1})
    moved = dead_letter(row, progress='{"p": 2}')
    assert isinstance(moved, JobSnapshot)
    assert (moved.id, moved.state, moved.queue, moved.attempt) == (row.id, "failed", Q, 1)
    assert moved.errors[-1]["error"] == "boom" and moved.errors[-1]["terminal"] is True
    assert moved.errors[-1]["type"] == "builtins.ValueError"
    assert not Job.objects.filter(id=row.id).exists()
    assert not ActiveLease.objects.filter(job_id=row.id).exists()
    letter = DeadLetter.objects.get(id=row.id)
    assert (letter.reason, letter.run_lease, letter.tags) == ("terminal_error", 1, ["a"])
    assert letter.metadata == {"m": 1} and letter.progress == {"p": 2}
    assert letter.errors == moved.errors
    assert moved.finalized_at == letter.dead_lettered_at


def test_job_dead_letter_if_running_is_guarded_by_run_lease():
    row = running()
    assert dead_letter(row, run_lease=row.run_lease + 1) is None
    assert Job.objects.get(id=row.id).state == "running"
    assert not DeadLetter.objects.exists()


def test_job_dead_letter_if_running_frees_the_unique_key():
    key = b"k" * 16
    row = running(unique_key=key, unique_states=UniqueOpts().states_mask)
    dead_letter(row)
    assert DeadLetter.objects.get(id=row.id).unique_key == key
    JobFactory(unique_key=key, unique_states=UniqueOpts().states_mask)  # no conflict


@pytest.mark.usefixtures("big_table")
def test_job_dead_letter_if_running_plan_is_an_index_probe():
    plan = explain(
        dead_letters_sql.job_dead_letter_if_running,
        id=1,
        run_lease=1,
        reason="terminal_error",
        error=None,
        error_type=None,
        terminal=False,
        progress=None,
    )
    assert "Index Scan" in plan and "Seq Scan on awa_jobs_hot" not in plan, plan


# -- the rescues on a dead-letter queue ------------------------------------------------------
def test_job_rescue_stale_heartbeat_dead_letters_a_last_attempt_of_a_dead_letter_queue():
    last = running(attempt=1, max_attempts=2)  # the claim made it 2 of 2
    other = running(attempt=0, max_attempts=2)
    ActiveLease.objects.update(heartbeat_at=timezone.now() - AGO)
    rescued = maintenance_sql.job_rescue_stale_heartbeat(
        limit=10, staleness_seconds=1, message="stale", dead_letter_queues=[Q]
    ).run("default")
    by_id = {r.id: r for r in rescued}
    assert (by_id[last.id].state, by_id[other.id].state) == ("failed", "retryable")
    assert not Job.objects.filter(id=last.id).exists()
    letter = DeadLetter.objects.get(id=last.id)
    assert letter.reason == "max_attempts_exhausted"
    assert [(e["error"], e["terminal"]) for e in letter.errors] == [("stale", True)]
    assert not ActiveLease.objects.exists()


def test_job_rescue_deadline_dead_letters_only_on_dead_letter_queues():
    row = running(attempt=0, max_attempts=1)
    ActiveLease.objects.update(deadline_at=timezone.now() - AGO)
    (rescued,) = maintenance_sql.job_rescue_deadline(
        limit=10, message="late", dead_letter_queues=["elsewhere"]
    ).run("default")
    assert rescued.state == "failed" and Job.objects.get(id=row.id).state == "failed"
    assert not DeadLetter.objects.exists()


def test_job_rescue_expired_callback_dead_letters_as_callback_timeout():
    def parked(attempt: int) -> Job:
        return JobFactory(
            state="waiting_external",
            attempt=attempt,
            max_attempts=2,
            run_lease=attempt,
            callback_id=uuid.uuid4(),
            callback_timeout_at=timezone.now() - AGO,
        )

    last, earlier = parked(2), parked(1)
    rescued = maintenance_sql.job_rescue_expired_callback(
        limit=10, message="callback timed out", dead_letter_queues=[Q]
    ).run("default")
    assert {(r.id, r.state) for r in rescued} == {(last.id, "failed"), (earlier.id, "retryable")}
    assert DeadLetter.objects.get(id=last.id).reason == "callback_timeout"
    assert Job.objects.get(id=earlier.id).state == "retryable"


@pytest.mark.usefixtures("big_table")
def test_job_rescue_expired_callback_with_dead_letters_still_uses_the_timeout_index():
    plan = explain(
        maintenance_sql.job_rescue_expired_callback,
        limit=500,
        message="m",
        dead_letter_queues=["q1"],
    )
    assert "awa_jobs_cb_timeout_idx" in plan and "Seq Scan on awa_jobs_hot" not in plan, plan


# -- job_fail_external on a dead-letter queue ------------------------------------------------
def test_job_fail_external_dead_letters_on_a_dead_letter_queue_as_callback_failed():
    cb = uuid.uuid4()
    job = JobFactory(state="waiting_external", attempt=1, run_lease=1, callback_id=cb)
    failed = callbacks_sql.job_fail_external(
        callback_id=cb, run_lease=None, error="nope", dead_letter_queues=[Q]
    ).run("default")
    assert failed is not None and (failed.id, failed.state) == (job.id, "failed")
    letter = DeadLetter.objects.get(id=job.id)
    assert letter.reason == "callback_failed" and letter.errors[-1]["error"] == "nope"
    assert not Job.objects.filter(id=job.id).exists()
    again = callbacks_sql.job_fail_external(
        callback_id=cb, run_lease=None, error="nope", dead_letter_queues=[Q]
    )
    assert again.run("default") is None


# -- dead_letter_retry_many -------------------------------------------------------------------
def test_dead_letter_retry_many_puts_jobs_back_available_with_history_and_run_lease():
    letter = DeadLetterFactory(run_lease=3, attempt=3, errors=[{"error": "x", "attempt": 3}])
    (job,) = dead_letters_sql.dead_letter_retry_many(
        ids=[letter.id], queue="elsewhere", priority=1
    ).run("default")
    assert (job.id, job.state, job.attempt, job.run_lease) == (letter.id, "available", 0, 3)
    assert (job.queue, job.priority, job.errors) == ("elsewhere", 1, letter.errors)
    assert not DeadLetter.objects.exists()


def test_dead_letter_retry_many_leaves_a_dead_letter_whose_unique_key_is_held():
    key = b"u" * 16
    mask = UniqueOpts().states_mask
    held = DeadLetterFactory(unique_key=key, unique_states=mask)
    free = DeadLetterFactory()
    JobFactory(unique_key=key, unique_states=mask)
    retried = dead_letters_sql.dead_letter_retry_many(
        ids=[held.id, free.id], queue=None, priority=None
    ).run("default")
    assert [r.id for r in retried] == [free.id]
    assert list(DeadLetter.objects.values_list("id", flat=True)) == [held.id]


# -- dead_letter_enter_failed, dead_letter_prune --------------------------------------------
def test_dead_letter_enter_failed_moves_failed_jobs_only():
    failed = JobFactory(state="failed", errors=[{"error": "e"}])
    live = JobFactory(state="available")
    moved = dead_letters_sql.dead_letter_enter_failed(ids=[failed.id, live.id]).run("default")
    assert moved == 1
    letter = DeadLetter.objects.get()
    assert (letter.id, letter.reason, letter.errors) == (failed.id, "manual", [{"error": "e"}])
    assert list(Job.objects.values_list("id", flat=True)) == [live.id]


def test_dead_letter_prune_deletes_past_retention_in_batches():
    old = DeadLetterFactory.create_batch(3)
    DeadLetter.objects.filter(id__in=[o.id for o in old]).update(
        dead_lettered_at=timezone.now() - AGO
    )
    recent = DeadLetterFactory()
    prune = dead_letters_sql.dead_letter_prune(retention_seconds=3600, limit=2)
    assert prune.run("default") == 2
    assert prune.run("default") == 1
    assert list(DeadLetter.objects.values_list("id", flat=True)) == [recent.id]


def test_dead_letter_prune_plan_uses_the_dead_lettered_at_index():
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO awa_dead_letters (id, kind, queue, args, priority, attempt,
                max_attempts, run_lease, created_at, errors, metadata, tags, attempted_by,
                reason, dead_lettered_at)
            SELECT g, 'k', 'q', '{}', 2, 1, 1, 1, now(), '[]', '{}', '{}', '{}',
                   'terminal_error', now() - g * interval '1 minute'
            FROM generate_series(1, 20000) g
            """
        )
        cursor.execute("ANALYZE awa_dead_letters")
    plan = explain(dead_letters_sql.dead_letter_prune, retention_seconds=60, limit=100)
    assert "awa_dead_letters_at_idx" in plan, plan


def test_every_dead_letter_statement_has_a_test_named_after_it():
    statements = [v for v in vars(dead_letters_sql).values() if isinstance(v, Statement)]
    tests = [name for name in globals() if name.startswith("test_")]
    assert sorted(s.name for s in statements if not any(s.name in t for t in tests)) == []
    for statement in statements:
        assert callable(getattr(dead_letters_sql, statement.name, None)), statement.name


# -- helpers ----------------------------------------------------------------------------------
def explain(statement: Any, **params: Any) -> str:
    query = statement(**params)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + query.statement.sql, query.params)
        return "\n".join(line for (line,) in cursor.fetchall())


@pytest.fixture
def big_table() -> None:
    """20,000 jobs, 500 parked with a callback timeout, analysed."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt,
                max_attempts, run_at, created_at, run_lease, errors, metadata, tags,
                attempted_by, callback_id, callback_timeout_at)
            SELECT 'dl_explain', 'q' || (g % 10), '{}',
                   CASE WHEN g % 40 = 3 THEN 'waiting_external' ELSE 'completed' END,
                   2, 1, 25, now(), now(), 1, '[]', '{}', '{}', '{}',
                   CASE WHEN g % 40 = 3 THEN gen_random_uuid() END,
                   CASE WHEN g % 40 = 3 THEN now() + (g % 600 - 300) * interval '1 second' END
            FROM generate_series(1, 20000) g
            """
        )
        cursor.execute("ANALYZE awa_jobs_hot")
