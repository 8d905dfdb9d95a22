"""Dead letters end to end on real PostgreSQL (docs/dead-letters.md, decision 016): the
attempt's failures on a dead-letter queue (inline runner, the worker's steps), the events,
the rescuer and pruner services, `fail_external`, and every Client dead-letter verb.
"""

from __future__ import annotations

import datetime as dt
import io
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import override_settings
from django.utils import timezone

import awa_django
from awa_django import Client, DeadLetterReason, Exhausted
from awa_django.events import Event
from awa_django.exceptions import (
    DeadLetterFilterRequired,
    DeadLetterNotFound,
    InvalidDeadLetterQuery,
    InvalidEnqueueOption,
    InvalidQueueName,
    TerminalError,
    UniqueConflict,
)
from awa_django.execution.inline import run_available
from awa_django.storage.models import ActiveLease, DeadLetter, Job
from awa_django.testing import capture_events
from awa_django.unique import UniqueOpts
from awa_django.worker.database import Database
from awa_django.worker.maintenance.pruner import Pruner
from awa_django.worker.maintenance.rescuer import Rescuer
from tests.factories import DeadLetterFactory, JobFactory
from tests.runtime_db import with_db

pytestmark = pytest.mark.django_db

DLQ = "dl-core"
AWA = {"QUEUES": {"default": {}, DLQ: {"dead_letter": True}}}


@dataclass
class DlCore:
    mode: str  # raise | terminal | ok | bad_retry


@awa_django.job(DlCore, queue=DLQ, max_attempts=2)
def dl_core(job: awa_django.JobContext[DlCore]) -> Any:
    if job.args.mode == "raise":
        raise RuntimeError(f"failed attempt {job.attempt}")
    if job.args.mode == "terminal":
        raise TerminalError("card declined")
    return None


@pytest.fixture(autouse=True)
def dead_letter_queue() -> Any:
    with override_settings(AWA=AWA):
        yield


def run_now(job_id: int) -> None:
    """Run the queue, making a retry due and available again until the job left."""
    for _ in range(5):
        Job.objects.filter(id=job_id, state="retryable").update(
            state="available", run_at=timezone.now() - dt.timedelta(minutes=1)
        )
        run_available(DLQ)
        if not Job.objects.filter(id=job_id).exclude(state="completed").exists():
            return


# -- the attempt --------------------------------------------------------------------------
def test_exhausted_attempts_move_the_job_to_the_dead_letters(django_capture_on_commit_callbacks):
    job = awa_django.enqueue(DlCore("raise"))
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        run_now(job.id)
    assert not Job.objects.filter(id=job.id).exists()
    letter = Client().dead_letter(job.id)
    assert (letter.reason, letter.attempt, letter.queue) == ("max_attempts_exhausted", 2, DLQ)
    assert [e["attempt"] for e in letter.errors] == [1, 2]
    assert letter.error.startswith("RuntimeError: failed attempt 2")
    (exhausted,) = captured.of_type(Exhausted)
    assert isinstance(exhausted, Exhausted) and exhausted.dead_lettered is True
    assert (exhausted.job.state, exhausted.job.id, exhausted.attempt) == ("failed", job.id, 2)
    assert exhausted.error.startswith("RuntimeError: failed attempt 2")
    assert captured.names().count("Retried") == 1


def test_a_terminal_error_dead_letters_at_once():
    job = awa_django.enqueue(DlCore("terminal"))
    run_available(DLQ)
    letter = Client().dead_letter(job.id)
    assert (letter.reason, letter.attempt) == (DeadLetterReason.TERMINAL_ERROR, 1)
    assert letter.errors[-1]["terminal"] is True


def test_an_unknown_kind_dead_letters_as_a_terminal_error():
    job = awa_django.enqueue({"x": 1}, kind="dl_nobody_handles", queue=DLQ)
    run_available(DLQ)
    assert Client().dead_letter(job.id).reason == "terminal_error"


def test_a_queue_without_the_opt_in_keeps_failed_jobs_among_the_jobs():
    job = awa_django.enqueue(DlCore("terminal"), queue="default")
    run_available("default")
    assert Job.objects.get(id=job.id).state == "failed"
    assert not DeadLetter.objects.exists()


def test_completions_and_retries_of_a_dead_letter_queue_stay_jobs():
    ok = awa_django.enqueue(DlCore("ok"))
    retry = awa_django.enqueue(DlCore("raise"))
    run_available(DLQ)
    assert Job.objects.get(id=ok.id).state == "completed"
    assert Job.objects.get(id=retry.id).state == "retryable"
    assert not DeadLetter.objects.exists()


# -- fail_external ------------------------------------------------------------------------
def test_fail_external_on_a_dead_letter_queue_dead_letters(django_capture_on_commit_callbacks):
    cb = uuid.uuid4()
    job = JobFactory(queue=DLQ, state="waiting_external", attempt=1, callback_id=cb)
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        row = Client().fail_external(cb, "rejected by the bank")
    assert (row.id, row.state) == (job.id, "failed")
    assert Client().dead_letter(job.id).reason == "callback_failed"
    (event,) = captured.of_type(Exhausted)
    assert isinstance(event, Exhausted) and event.dead_lettered is True
    assert event.error == "rejected by the bank"


def test_fail_external_elsewhere_still_fails_in_place(django_capture_on_commit_callbacks):
    cb = uuid.uuid4()
    job = JobFactory(state="waiting_external", attempt=1, callback_id=cb)
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        Client().fail_external(cb, "no")
    assert Job.objects.get(id=job.id).state == "failed"
    (event,) = captured.of_type(Exhausted)
    assert isinstance(event, Exhausted) and event.dead_lettered is False


# -- Client: read -------------------------------------------------------------------------
def test_dead_letters_pages_newest_first_with_a_cursor():
    letters = DeadLetterFactory.create_batch(5, queue=DLQ)
    base = timezone.now() - dt.timedelta(hours=1)
    for n, letter in enumerate(letters):  # two share a moment: the id breaks the tie
        DeadLetter.objects.filter(id=letter.id).update(
            dead_lettered_at=base + dt.timedelta(seconds=min(n, 3))
        )
    client, seen = Client(), []
    page = client.dead_letters(limit=2)
    seen += [d.id for d in page.items]
    while page.next_cursor:
        page = client.dead_letters(limit=2, after=page.next_cursor)
        seen += [d.id for d in page.items]
    assert seen == [letters[4].id, letters[3].id, letters[2].id, letters[1].id, letters[0].id]


def test_dead_letters_filter_by_kind_queue_tag_and_reason():
    a = DeadLetterFactory(kind="a", queue="q1", tags=["vip"], reason="terminal_error")
    DeadLetterFactory(kind="b", queue="q1")
    DeadLetterFactory(kind="a", queue="q2")
    client = Client()
    assert [d.id for d in client.dead_letters(kind="a", queue="q1").items] == [a.id]
    assert [d.id for d in client.dead_letters(tag="vip").items] == [a.id]
    assert [d.id for d in client.dead_letters(reason="terminal_error").items] == [a.id]
    assert client.count_dead_letters() == 3
    assert client.count_dead_letters(kind="a") == 2
    assert client.dead_letter_depth() == {"q1": 2, "q2": 1}


@pytest.mark.parametrize(
    "options",
    [{"after": "nonsense"}, {"limit": 0}, {"limit": 10_001}, {"reason": "dead"}, {"kind": 3}],
)
def test_dead_letters_refuses_bad_input_with_a_typed_error(options):
    with pytest.raises(InvalidDeadLetterQuery):
        Client().dead_letters(**options)


def test_dead_letter_of_an_unknown_id_is_a_typed_error():
    with pytest.raises(DeadLetterNotFound):
        Client().dead_letter(123)


# -- Client: retry ------------------------------------------------------------------------
def test_retry_dead_letter_onto_another_queue_and_priority_keeps_history():
    job = awa_django.enqueue(DlCore("terminal"))
    run_available(DLQ)
    letter = Client().dead_letter(job.id)
    back = Client().retry_dead_letter(job.id, to_queue="default", priority=1)
    assert (back.id, back.state, back.attempt) == (job.id, "available", 0)
    assert (back.queue, back.priority, back.errors) == ("default", 1, letter.errors)
    assert back.run_lease == letter.run_lease  # the guard stays monotonic
    assert not DeadLetter.objects.exists()
    with pytest.raises(DeadLetterNotFound):
        Client().retry_dead_letter(job.id)


def test_a_retried_dead_letter_runs_again():
    job = awa_django.enqueue(DlCore("terminal"))
    run_available(DLQ)
    Client().retry_dead_letter(job.id)
    Job.objects.filter(id=job.id).update(args={"mode": "ok"})
    run_available(DLQ)
    done = Job.objects.get(id=job.id)
    assert (done.state, done.attempt, done.run_lease) == ("completed", 1, 2)


def test_retry_dead_letter_with_a_held_unique_key_is_a_unique_conflict():
    mask = UniqueOpts().states_mask
    letter = DeadLetterFactory(unique_key=b"h" * 16, unique_states=mask)
    JobFactory(unique_key=b"h" * 16, unique_states=mask)
    with pytest.raises(UniqueConflict, match="holds its unique key"):
        Client().retry_dead_letter(letter.id)
    assert DeadLetter.objects.filter(id=letter.id).exists()


@pytest.mark.parametrize(
    ("options", "error"),
    [({"to_queue": "bad queue"}, InvalidQueueName), ({"priority": 500}, InvalidEnqueueOption)],
)
def test_retry_dead_letter_checks_its_options(options, error):
    letter = DeadLetterFactory()
    with pytest.raises(error):
        Client().retry_dead_letter(letter.id, **options)
    assert DeadLetter.objects.filter(id=letter.id).exists()


def test_retry_dead_letters_in_bulk_reports_conflicts(monkeypatch):
    from awa_django.client import dead_letters

    monkeypatch.setattr(dead_letters, "BATCH", 2)  # several batches
    mask = UniqueOpts().states_mask
    mine = DeadLetterFactory.create_batch(4, kind="mine")
    held = DeadLetterFactory(kind="mine", unique_key=b"z" * 16, unique_states=mask)
    other = DeadLetterFactory(kind="other")
    JobFactory(unique_key=b"z" * 16, unique_states=mask)
    result = Client().retry_dead_letters(kind="mine", priority=3)
    assert result.retried == tuple(sorted(d.id for d in mine))
    assert result.conflicts == (held.id,)
    assert set(Job.objects.filter(id__in=result.retried).values_list("priority", flat=True)) == {3}
    assert set(DeadLetter.objects.values_list("id", flat=True)) == {held.id, other.id}


def test_bulk_operations_need_a_filter_or_all():
    DeadLetterFactory.create_batch(2)
    client = Client()
    with pytest.raises(DeadLetterFilterRequired):
        client.retry_dead_letters()
    with pytest.raises(DeadLetterFilterRequired):
        client.purge_dead_letters()
    with pytest.raises(DeadLetterFilterRequired):
        client.dead_letter_failed()
    assert DeadLetter.objects.count() == 2
    assert client.purge_dead_letters(all=True) == 2


# -- Client: purge, move in ----------------------------------------------------------------
def test_purge_dead_letter_and_purge_by_filter():
    one, two = DeadLetterFactory(queue="a"), DeadLetterFactory(queue="b")
    client = Client()
    assert client.purge_dead_letter(one.id) is True
    assert client.purge_dead_letter(one.id) is False
    assert client.purge_dead_letters(queue="a") == 0
    assert client.purge_dead_letters(queue="b") == 1
    assert not DeadLetter.objects.filter(id=two.id).exists()


def test_dead_letter_failed_moves_already_failed_jobs_in():
    failed = JobFactory(kind="old", state="failed", errors=[{"error": "e"}])
    JobFactory(kind="old", state="completed")
    JobFactory(kind="new", state="failed")
    assert Client().dead_letter_failed(kind="old") == 1
    letter = Client().dead_letter(failed.id)
    assert (letter.reason, letter.errors) == ("manual", [{"error": "e"}])
    assert not Job.objects.filter(id=failed.id).exists()


def test_async_twins_work():
    letter = DeadLetterFactory(queue="q")
    client = Client()
    assert async_to_sync(client.adead_letter)(letter.id).id == letter.id
    assert async_to_sync(client.adead_letter_depth)() == {"q": 1}
    assert async_to_sync(client.apurge_dead_letter)(letter.id) is True


# -- the leader's services ----------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_rescuer_dead_letters_a_last_attempt_and_says_so():
    job = JobFactory(queue=DLQ, state="available", max_attempts=1)
    from awa_django.storage.sql import jobs as jobs_sql

    jobs_sql.job_claim_many(
        lease_now=True, queue=DLQ, limit=1, worker_id="w", deadline_seconds=0
    ).run("default")
    ActiveLease.objects.update(heartbeat_at=timezone.now() - dt.timedelta(hours=1))
    emitted: list[Event] = []

    async def step(db: Database) -> Any:
        rescuer = Rescuer(db, 90, emitted.append, dead_letter_queues=[DLQ])
        return await rescuer.run_once()

    with_db(step)
    # One transition, one event (decision 035): Exhausted carrying the rescue's reason.
    (exhausted,) = emitted
    assert isinstance(exhausted, Exhausted) and exhausted.dead_lettered is True
    assert exhausted.reason == "stale_heartbeat"
    assert DeadLetter.objects.get(id=job.id).reason == "max_attempts_exhausted"
    assert not Job.objects.filter(id=job.id).exists()


@pytest.mark.django_db(transaction=True)
def test_the_pruner_deletes_dead_letters_past_their_retention():
    old, young = DeadLetterFactory(), DeadLetterFactory()
    DeadLetter.objects.filter(id=old.id).update(
        dead_lettered_at=timezone.now() - dt.timedelta(days=31)
    )

    async def step(db: Database) -> int:
        return await Pruner(db, 3600, 3600, dead_letter_retention=30 * 86400).prune_all()

    assert with_db(step) == 1
    assert list(DeadLetter.objects.values_list("id", flat=True)) == [young.id]


# -- the migration --------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_migration_applies_with_jobs_in_flight_and_touches_no_job_table():
    from django.core.management import call_command
    from django.db.migrations.executor import MigrationExecutor

    JobFactory(state="running", run_lease=1)
    JobFactory.create_batch(3)
    before = sorted(Job.objects.values_list("id", "state", "run_lease"))
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("awa_django", "0005_unique_jobs")])
        assert "awa_dead_letters" not in connection.introspection.table_names()
        executor = MigrationExecutor(connection)
        executor.migrate([("awa_django", "0006_dead_letters")])
    finally:
        call_command("migrate", "awa_django", verbosity=0)
    assert "awa_dead_letters" in connection.introspection.table_names()
    assert sorted(Job.objects.values_list("id", "state", "run_lease")) == before
    out = io.StringIO()
    call_command("sqlmigrate", "awa_django", "0006_dead_letters", stdout=out)
    assert "awa_dead_letters" in out.getvalue() and "awa_jobs_hot" not in out.getvalue()
