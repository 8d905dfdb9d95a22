"""Unique jobs on real PostgreSQL: the key enqueue stores, UniqueConflict inside a caller's
transaction that stays usable, the `@job` default and the per-call override, keys freed
by leaving the unique states, `enqueue_many`'s two conflict modes, two concurrent
enqueues of one key on two connections, `cancel_by_unique_key`, and what non-unique jobs
pay (nothing: the same single statement)."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection, connections, transaction
from django.utils import timezone

import awa_django
from awa_django import EnqueueManyResult, TerminalError, UniqueConflict, UniqueOpts
from awa_django.events import Cancelled
from awa_django.exceptions import InvalidEnqueueOption
from awa_django.storage.models import Job
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.testing import capture_events, drain
from awa_django.unique import unique_key
from awa_django.worker.database import connection_kwargs
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
Q = "core-unique"


@dataclass
class CoreUniqueMail:
    to: str


@awa_django.job(CoreUniqueMail, queue=Q)
def core_unique_mail(job: awa_django.JobContext[CoreUniqueMail]) -> None:
    return None


@dataclass
class CoreUniqueReport:
    day: str


# The kind's default: one live report per day (args), whatever the queue.
@awa_django.job(CoreUniqueReport, queue=Q, unique=UniqueOpts())
def core_unique_report(job: awa_django.JobContext[CoreUniqueReport]) -> None:
    return None


@dataclass
class CoreUniqueDoomed:
    n: int


@awa_django.job(CoreUniqueDoomed, queue="core-unique-doomed", unique=UniqueOpts())
def core_unique_doomed(job: awa_django.JobContext[CoreUniqueDoomed]) -> None:
    raise TerminalError("no")


def stored(job_id: int) -> tuple[bytes | None, str | None]:
    row = Job.objects.values_list("unique_key", "unique_states").get(id=job_id)
    return (bytes(row[0]) if row[0] is not None else None, row[1])


# -- enqueue ------------------------------------------------------------------------------
def test_a_unique_job_stores_awas_key_and_mask() -> None:
    row = awa_django.enqueue(CoreUniqueMail(to="a@b.c"), unique=UniqueOpts())
    key = unique_key("core_unique_mail", args={"to": "a@b.c"})
    assert stored(row.id) == (key, "11111000")


def test_a_job_without_unique_has_no_key_and_duplicates_freely() -> None:
    first = awa_django.enqueue(CoreUniqueMail(to="a@b.c"))
    second = awa_django.enqueue(CoreUniqueMail(to="a@b.c"))
    assert stored(first.id) == stored(second.id) == (None, None)


def test_a_duplicate_raises_unique_conflict_naming_the_holder() -> None:
    first = awa_django.enqueue(CoreUniqueMail(to="a@b.c"), unique=UniqueOpts())
    with pytest.raises(UniqueConflict) as raised:
        awa_django.enqueue(CoreUniqueMail(to="a@b.c"), unique=UniqueOpts())
    assert raised.value.job_id == first.id
    assert f"job {first.id}" in str(raised.value)
    assert Job.objects.filter(kind="core_unique_mail").count() == 1


def test_the_callers_transaction_stays_usable_after_a_conflict() -> None:
    with transaction.atomic():
        first = awa_django.enqueue(CoreUniqueMail(to="a@b.c"), unique=UniqueOpts())
        with pytest.raises(UniqueConflict):
            awa_django.enqueue(CoreUniqueMail(to="a@b.c"), unique=UniqueOpts())
        other = awa_django.enqueue(CoreUniqueMail(to="x@y.z"), unique=UniqueOpts())
        assert not connection.needs_rollback
    assert set(Job.objects.values_list("id", flat=True)) == {first.id, other.id}


def test_a_unique_enqueue_is_one_statement_and_a_conflict_two(
    django_assert_num_queries: Any,
) -> None:
    with django_assert_num_queries(1):  # no savepoint: ON CONFLICT DO NOTHING
        awa_django.enqueue(CoreUniqueMail(to="a@b.c"), unique=UniqueOpts())
    with django_assert_num_queries(2), pytest.raises(UniqueConflict):
        awa_django.enqueue(CoreUniqueMail(to="a@b.c"), unique=UniqueOpts())
    with django_assert_num_queries(1):  # non-unique: the plain insert, as before
        awa_django.enqueue(CoreUniqueMail(to="a@b.c"))


def test_by_args_by_queue_and_by_period_pick_the_parts_of_the_key() -> None:
    awa_django.enqueue(CoreUniqueMail(to="a"), unique=UniqueOpts())
    awa_django.enqueue(CoreUniqueMail(to="b"), unique=UniqueOpts())  # other args
    awa_django.enqueue(CoreUniqueMail(to="c"), unique=UniqueOpts(by_args=False))
    with pytest.raises(UniqueConflict):  # args left out: any args is a duplicate
        awa_django.enqueue(CoreUniqueMail(to="x"), unique=UniqueOpts(by_args=False))
    by_queue = UniqueOpts(by_queue=True)
    awa_django.enqueue(CoreUniqueMail(to="d"), queue="q1", unique=by_queue)
    awa_django.enqueue(CoreUniqueMail(to="d"), queue="q2", unique=by_queue)
    with pytest.raises(UniqueConflict):
        awa_django.enqueue(CoreUniqueMail(to="d"), queue="q1", unique=by_queue)
    awa_django.enqueue(CoreUniqueMail(to="e"), queue="q1", unique=UniqueOpts())
    with pytest.raises(UniqueConflict):  # without by_queue the queue does not matter
        awa_django.enqueue(CoreUniqueMail(to="e"), queue="q3", unique=UniqueOpts())


def test_by_period_buckets_run_at() -> None:
    hourly = UniqueOpts(by_period=3600)
    hour = (int(time.time()) // 3600 + 2) * 3600  # an hour boundary in the future
    at = dt.datetime.fromtimestamp(hour, dt.UTC)
    awa_django.enqueue(CoreUniqueMail(to="a"), run_at=at, unique=hourly)
    with pytest.raises(UniqueConflict):  # same hour
        awa_django.enqueue(
            CoreUniqueMail(to="a"), run_at=at + dt.timedelta(minutes=59), unique=hourly
        )
    later = awa_django.enqueue(
        CoreUniqueMail(to="a"), run_at=at + dt.timedelta(hours=1), unique=hourly
    )
    assert later.state == "scheduled"
    # Without run_at the bucket is now's, another hour than both.
    awa_django.enqueue(CoreUniqueMail(to="a"), unique=hourly)


def test_states_decide_while_which_states_a_job_holds_its_key() -> None:
    only_available = UniqueOpts(states={"available"})
    awa_django.enqueue(CoreUniqueMail(to="a"), unique=only_available)
    # A scheduled duplicate is not in its own states: it neither holds nor conflicts.
    soon = timezone.now() + dt.timedelta(hours=1)
    awa_django.enqueue(CoreUniqueMail(to="a"), run_at=soon, unique=only_available)
    with pytest.raises(UniqueConflict):
        awa_django.enqueue(CoreUniqueMail(to="a"), unique=only_available)


# -- the kind's default and the per-call choice -------------------------------------------
def test_the_job_declaration_makes_every_enqueue_of_its_kind_unique() -> None:
    first = awa_django.enqueue(CoreUniqueReport(day="mon"))
    assert stored(first.id)[0] is not None
    with pytest.raises(UniqueConflict):
        awa_django.enqueue(CoreUniqueReport(day="mon"))


def test_a_call_overrides_the_declaration_or_opts_out_with_false() -> None:
    awa_django.enqueue(CoreUniqueReport(day="mon"))
    # Its own options: the key of by_queue differs from the declaration's.
    awa_django.enqueue(CoreUniqueReport(day="mon"), unique=UniqueOpts(by_queue=True))
    out = awa_django.enqueue(CoreUniqueReport(day="mon"), unique=False)
    assert stored(out.id) == (None, None)
    with pytest.raises(UniqueConflict):  # None (or left out): the declaration again
        awa_django.enqueue(CoreUniqueReport(day="mon"), unique=None)


@pytest.mark.parametrize("bad", [True, "yes", {"by_args": True}])
def test_unique_must_be_unique_opts_false_or_none(bad: Any) -> None:
    with pytest.raises(InvalidEnqueueOption):
        awa_django.enqueue(CoreUniqueMail(to="a"), unique=bad)
    with pytest.raises(InvalidEnqueueOption):
        awa_django.job(CoreUniqueMail, unique=bad)


# -- leaving the unique states frees the key ----------------------------------------------
def test_a_failed_job_frees_its_key_in_the_statement_that_fails_it() -> None:
    first = awa_django.enqueue(CoreUniqueDoomed(n=1))
    with pytest.raises(UniqueConflict):
        awa_django.enqueue(CoreUniqueDoomed(n=1))
    drain("core-unique-doomed")
    assert Job.objects.get(id=first.id).state == "failed"
    again = awa_django.enqueue(CoreUniqueDoomed(n=1))
    assert again.id != first.id


def test_a_cancelled_job_frees_its_key_a_completed_one_keeps_it() -> None:
    first = awa_django.enqueue(CoreUniqueMail(to="a"), unique=UniqueOpts())
    awa_django.Client().cancel(first.id)
    awa_django.enqueue(CoreUniqueMail(to="a"), unique=UniqueOpts())
    drain(Q)  # completed is one of the default states
    with pytest.raises(UniqueConflict):
        awa_django.enqueue(CoreUniqueMail(to="a"), unique=UniqueOpts())


def test_failed_in_the_states_keeps_the_key_after_failure() -> None:
    keep = UniqueOpts(states={"available", "running", "failed"})
    awa_django.enqueue(CoreUniqueDoomed(n=2), unique=keep)
    drain("core-unique-doomed")
    with pytest.raises(UniqueConflict):
        awa_django.enqueue(CoreUniqueDoomed(n=2), unique=keep)


def test_a_retry_of_a_failed_job_whose_key_is_held_raises_unique_conflict() -> None:
    first = awa_django.enqueue(CoreUniqueDoomed(n=3))
    drain("core-unique-doomed")
    awa_django.enqueue(CoreUniqueDoomed(n=3))  # the key is free again: a newer job takes it
    with pytest.raises(UniqueConflict), transaction.atomic():
        awa_django.Client().retry(first.id)
    assert Job.objects.get(id=first.id).state == "failed"


# -- maintenance batches never take a held key -------------------------------------------
def test_promotion_leaves_a_due_job_whose_key_is_held_and_promotes_the_rest() -> None:
    key, mask = b"k" * 16, UniqueOpts(states={"available"}).states_mask
    past = timezone.now() - dt.timedelta(minutes=1)
    holder = JobFactory(state="available", unique_key=key, unique_states=mask)
    waiting = JobFactory(state="scheduled", run_at=past, unique_key=key, unique_states=mask)
    plain = JobFactory(state="scheduled", run_at=past)
    assert maintenance_sql.job_promote_due(limit=100).run("default") == 1
    states = dict(Job.objects.values_list("id", "state"))
    assert (states[waiting.id], states[plain.id]) == ("scheduled", "available")
    awa_django.Client().cancel(holder.id)  # the key is free: promoted on the next pass
    assert maintenance_sql.job_promote_due(limit=100).run("default") == 1
    assert Job.objects.get(id=waiting.id).state == "available"


def test_callback_timeout_rescue_leaves_a_parked_job_whose_key_is_held() -> None:
    # waiting_external is outside the default states, retryable inside: the rescue would
    # move the parked job into its states while a newer duplicate holds the key.
    key, mask = b"p" * 16, UniqueOpts().states_mask
    expired = {
        "state": "waiting_external",
        "callback_timeout_at": timezone.now() - dt.timedelta(seconds=1),
    }
    parked = JobFactory(**expired, unique_key=key, unique_states=mask)
    JobFactory(state="available", unique_key=key, unique_states=mask)
    other = JobFactory(**expired)
    rescued = maintenance_sql.job_rescue_expired_callback(limit=10, message="m").run("default")
    assert [r.id for r in rescued] == [other.id]
    assert Job.objects.get(id=parked.id).state == "waiting_external"


# -- enqueue_many -------------------------------------------------------------------------
def test_enqueue_many_raises_on_the_first_conflict_and_writes_nothing() -> None:
    holder = awa_django.enqueue(CoreUniqueMail(to="b"), unique=UniqueOpts())
    jobs = [CoreUniqueMail(to=t) for t in ("a", "b", "c")]
    with transaction.atomic():
        with pytest.raises(UniqueConflict) as raised:
            awa_django.enqueue_many(jobs, unique=UniqueOpts())
        assert raised.value.job_id == holder.id
        assert "position 1" in str(raised.value)
        assert Job.objects.count() == 1
        ids = awa_django.enqueue_many([CoreUniqueMail(to="d")], unique=UniqueOpts())
    assert isinstance(ids, list) and Job.objects.count() == 2


def test_enqueue_many_raises_on_a_duplicate_within_the_call_without_a_holder_id() -> None:
    jobs = [CoreUniqueMail(to="a"), CoreUniqueMail(to="a")]
    with pytest.raises(UniqueConflict) as raised:
        awa_django.enqueue_many(jobs, unique=UniqueOpts())
    assert raised.value.job_id is None
    assert not Job.objects.exists()


def test_enqueue_many_skip_reports_skipped_positions() -> None:
    holder = awa_django.enqueue(CoreUniqueMail(to="b"), unique=UniqueOpts())
    jobs = [CoreUniqueMail(to=t) for t in ("a", "b", "c", "a")]
    result = awa_django.enqueue_many(jobs, unique=UniqueOpts(), on_conflict="skip")
    assert isinstance(result, EnqueueManyResult)
    assert result.skipped == [1, 3]
    assert len(result.ids) == 2 and result.job_ids[1] is None
    written = Job.objects.exclude(id=holder.id).order_by("id")
    assert [j.args["to"] for j in written] == ["a", "c"]
    assert [j.id for j in written] == result.ids


def test_enqueue_many_skip_without_unique_jobs_reports_every_id() -> None:
    result = awa_django.enqueue_many([CoreUniqueMail(to="a")] * 2, on_conflict="skip")
    assert result.skipped == [] and len(result.ids) == 2


def test_enqueue_many_mixes_declared_unique_and_plain_kinds() -> None:
    awa_django.enqueue(CoreUniqueReport(day="mon"))
    jobs = [CoreUniqueMail(to="a"), CoreUniqueReport(day="mon"), CoreUniqueReport(day="tue")]
    result = awa_django.enqueue_many(jobs, on_conflict="skip")
    assert result.skipped == [1]
    assert stored(result.ids[0]) == (None, None)


def test_enqueue_many_of_plain_jobs_is_the_one_plain_statement(
    django_assert_num_queries: Any,
) -> None:
    with django_assert_num_queries(1) as captured:
        ids = awa_django.enqueue_many([CoreUniqueMail(to="a")] * 3)
    assert isinstance(ids, list) and len(ids) == 3
    assert "unique" not in captured.captured_queries[0]["sql"]


def test_enqueue_many_refuses_an_unknown_conflict_mode() -> None:
    with pytest.raises(InvalidEnqueueOption):
        awa_django.enqueue_many([CoreUniqueMail(to="a")], on_conflict="ignore")  # type: ignore[call-overload]


# -- cancel_by_unique_key -----------------------------------------------------------------
def test_cancel_by_unique_key_cancels_through_cancel() -> None:
    row = awa_django.enqueue(CoreUniqueMail(to="a"), unique=UniqueOpts())
    client = awa_django.Client()
    with capture_events() as captured, transaction.atomic():
        cancelled = client.cancel_by_unique_key(CoreUniqueMail, args=CoreUniqueMail(to="a"))
        assert cancelled is not None and cancelled.id == row.id
        assert cancelled.state == "cancelled"
        assert captured.events == []  # dispatched on commit, as every cancel
        transaction.set_rollback(False)
    assert client.cancel_by_unique_key(CoreUniqueMail, args=CoreUniqueMail(to="a")) is None


def test_cancel_by_unique_key_fires_cancelled(django_capture_on_commit_callbacks: Any) -> None:
    row = awa_django.enqueue(CoreUniqueMail(to="a"), unique=UniqueOpts())
    with capture_events() as captured, django_capture_on_commit_callbacks(execute=True):
        awa_django.Client().cancel_by_unique_key("core_unique_mail", args={"to": "a"})
    (event,) = captured.events
    assert isinstance(event, Cancelled) and event.job.id == row.id


def test_cancel_by_unique_key_takes_the_oldest_live_job_with_the_key() -> None:
    # waiting_external is not in the default states: the parked job keeps its key column
    # but not the key, so a newer job holds it; Awa cancels the oldest live one.
    opts = UniqueOpts(by_args=False, by_queue=True)
    parked = awa_django.enqueue(CoreUniqueMail(to="a"), unique=opts)
    Job.objects.filter(id=parked.id).update(state="waiting_external")
    newer = awa_django.enqueue(CoreUniqueMail(to="b"), unique=opts)
    client = awa_django.Client()
    first = client.cancel_by_unique_key(CoreUniqueMail, queue=Q)
    second = client.cancel_by_unique_key(CoreUniqueMail, queue=Q)
    assert (first and first.id, second and second.id) == (parked.id, newer.id)
    assert client.cancel_by_unique_key(CoreUniqueMail, queue=Q) is None


def test_cancel_by_unique_key_recomputes_a_period_key() -> None:
    hourly = UniqueOpts(by_args=False, by_period=3600)
    at = timezone.now() + dt.timedelta(hours=3)
    row = awa_django.enqueue(CoreUniqueMail(to="a"), run_at=at, unique=hourly)
    client = awa_django.Client()
    assert client.cancel_by_unique_key(CoreUniqueMail, period_bucket=0) is None
    bucket = hourly.period_bucket(at)
    cancelled = client.cancel_by_unique_key(CoreUniqueMail, period_bucket=bucket)
    assert cancelled is not None and cancelled.id == row.id


def test_cancel_by_unique_key_checks_its_inputs() -> None:
    client = awa_django.Client()
    with pytest.raises(InvalidEnqueueOption):
        client.cancel_by_unique_key("")
    with pytest.raises(InvalidEnqueueOption):
        client.cancel_by_unique_key("k", period_bucket="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.cancel_by_unique_key(int)


# -- async twins --------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_async_twins() -> None:
    asyncio.run(async_twins())


async def async_twins() -> None:
    row = await awa_django.aenqueue(CoreUniqueMail(to="a"), unique=UniqueOpts())
    with pytest.raises(UniqueConflict):
        await awa_django.aenqueue(CoreUniqueMail(to="a"), unique=UniqueOpts())
    result = await awa_django.aenqueue_many(
        [CoreUniqueMail(to="a"), CoreUniqueMail(to="b")], unique=UniqueOpts(), on_conflict="skip"
    )
    assert result.skipped == [0]
    cancelled = await awa_django.Client().acancel_by_unique_key(
        CoreUniqueMail, args=CoreUniqueMail(to="a")
    )
    assert cancelled is not None and cancelled.id == row.id
    # The async twins ran in asgiref's sync thread: close its connection there.
    await sync_to_async(connections.close_all)()


# -- two connections, one key -------------------------------------------------------------
@pytest.fixture
def holder_connection() -> Iterator[psycopg.Connection[Any]]:
    """A second connection, in a transaction it keeps open until the test ends it."""
    kwargs = connection_kwargs("default", "awa-core-test-unique-holder")
    conn = psycopg.connect(**(kwargs | {"autocommit": False}))
    yield conn
    conn.close()


def insert_on(conn: psycopg.Connection[Any], opts: UniqueOpts, to: str) -> int:
    """The same row enqueue would write, through the same statement, on `conn`."""
    key = unique_key("core_unique_mail", args={"to": to})
    row = jobs_sql.job_insert_one_unique(
        kind="core_unique_mail",
        queue=Q,
        args=f'{{"to":"{to}"}}',
        state="available",
        priority=2,
        max_attempts=25,
        run_at=None,
        metadata="{}",
        tags=[],
        django_task=None,
        channels=[],
        unique_key=key,
        unique_states=opts.states_mask,
    ).run_on(conn)
    assert row is not None
    return row.id


def enqueue_in_thread(to: str) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def enqueue() -> None:
        try:
            outcome["row"] = awa_django.enqueue(CoreUniqueMail(to=to), unique=UniqueOpts())
        except Exception as exc:  # handed to the test thread
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=enqueue)
    thread.start()
    return thread, outcome


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def enqueue_waits_for_a_lock() -> bool:
    with psycopg.connect(**connection_kwargs("default", "awa-core-test-probe")) as probe:
        found = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE '%%awa_state_in_unique_states%%'"
        ).fetchone()
    return found is not None and found[0] > 0


@pytest.mark.django_db(transaction=True)
def test_of_two_concurrent_enqueues_the_second_conflicts_once_the_first_commits(
    holder_connection: psycopg.Connection[Any],
) -> None:
    first = insert_on(holder_connection, UniqueOpts(), "a")  # uncommitted
    thread, outcome = enqueue_in_thread("a")
    wait_for(enqueue_waits_for_a_lock)  # the second waits on the first's index entry
    assert thread.is_alive() and outcome == {}
    holder_connection.commit()
    thread.join(timeout=10)
    assert isinstance(outcome.get("error"), UniqueConflict), outcome
    assert outcome["error"].job_id == first
    assert list(Job.objects.values_list("id", flat=True)) == [first]


@pytest.mark.django_db(transaction=True)
def test_of_two_concurrent_enqueues_the_second_wins_if_the_first_rolls_back(
    holder_connection: psycopg.Connection[Any],
) -> None:
    insert_on(holder_connection, UniqueOpts(), "a")
    thread, outcome = enqueue_in_thread("a")
    wait_for(enqueue_waits_for_a_lock)
    holder_connection.rollback()
    thread.join(timeout=10)
    assert "row" in outcome, outcome
    assert list(Job.objects.values_list("id", flat=True)) == [outcome["row"].id]


# -- the migration's indexes --------------------------------------------------------------
def test_the_unique_indexes_are_valid_and_the_function_immutable() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid, i.indisunique FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname LIKE 'awa_jobs_unique%%' "
            "ORDER BY 1"
        )
        assert cursor.fetchall() == [
            ("awa_jobs_unique_idx", True, True),
            ("awa_jobs_unique_key_idx", True, False),
        ]
        cursor.execute(
            "SELECT provolatile, proisstrict FROM pg_proc "
            "WHERE proname = 'awa_state_in_unique_states'"
        )
        # Immutable (an index predicate must be) and not strict, so PostgreSQL inlines it
        # instead of calling it on every insert, claim and completion (decision 012).
        assert cursor.fetchall() == [("i", False)]
        cursor.execute("SELECT awa_state_in_unique_states(NULL, 'available')")
        assert cursor.fetchone() == (None,)  # no key, not in the index


@pytest.mark.django_db(transaction=True)
def test_the_migration_builds_on_a_table_with_jobs_and_redoes_an_invalid_index() -> None:
    migration = importlib.import_module("awa_django.migrations.0005_unique_jobs")
    mask = UniqueOpts().states_mask
    for n, state in enumerate(["available", "running", "failed", "scheduled", "completed"]):
        JobFactory(state=state, unique_key=bytes([n]) * 16, unique_states=mask)
    JobFactory.create_batch(20)
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX awa_jobs_unique_key_idx")
        # What a concurrent build that failed half-way leaves behind.
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false "
            "WHERE indexrelid = 'awa_jobs_unique_idx'::regclass"
        )
    with connection.schema_editor(atomic=False) as editor:
        migration.build_indexes(None, editor)
    test_the_unique_indexes_are_valid_and_the_function_immutable()
    # The rebuilt index enforces the key again.
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa_jobs_hot SET unique_key = %s WHERE unique_key = %s",
            [bytes([0]) * 16, bytes([1]) * 16],
        )
