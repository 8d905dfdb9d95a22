"""The fast enqueue paths (decision 026) on real PostgreSQL: enqueue_many's COPY writes
the rows the INSERT would (hostile but valid values included), returns ids in input
order, stays inside the caller's transaction and wakes workers only on commit; the
enqueue statements are prepared on Django's connection without preparing anything else,
and a single enqueue stays one statement."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

import awa_django
from awa_django.client.inserts import COPY_MIN_ROWS
from awa_django.exceptions import SerializationError
from awa_django.snapshot import JobSnapshot
from awa_django.storage.connection import _KEPT, keeps_prepared
from awa_django.storage.models import Job
from awa_django.worker.database import connection_kwargs
from tests.listening import Listener

pytestmark = pytest.mark.django_db

# Characters that COPY's text format, array literals or JSON treat specially.
HOSTILE = 'tab\there, new\nline, cr\r, back\\slash, "quote", {brace}, comma, \\N, é ☃ 𝄞'


@dataclass
class CorePathInner:
    text: str


@dataclass
class CorePathJob:
    n: int
    text: str = HOSTILE
    inner: CorePathInner = field(default_factory=lambda: CorePathInner(HOSTILE))
    values: list[Any] = field(default_factory=lambda: [1.5, None, True, "\\u0000 as text"])


@dataclass
class CorePathOther:
    n: int


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """The SQL of every statement Django's connection executes while the test runs."""
    seen: list[str] = []

    def record(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        seen.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(record):
        yield seen


def stored(job_id: int) -> dict[str, Any]:
    """Every column of a job but those that differ between two enqueues of the same job."""
    row = JobSnapshot.from_mapping(Job.objects.values().get(id=job_id))
    values = dataclasses.asdict(row)
    for name in ("id", "created_at", "run_at"):
        values.pop(name)
    return values


HOSTILE_OPTIONS: dict[str, Any] = {
    "kind": "core\tpath \\ kind\n",
    "queue": "core-path",
    "priority": 1,
    "max_attempts": 7,
    "tags": [HOSTILE, "plain", "NULL", "{}", 'q"'],
    "metadata": {"note": HOSTILE, "nested": {"list": [HOSTILE]}},
}


def test_copy_writes_what_the_insert_writes() -> None:
    copied = awa_django.enqueue_many(
        [CorePathJob(n=i) for i in range(COPY_MIN_ROWS)], **HOSTILE_OPTIONS
    )
    inserted = awa_django.enqueue_many([CorePathJob(n=0)], **HOSTILE_OPTIONS)
    one = awa_django.enqueue(CorePathJob(n=0), **HOSTILE_OPTIONS)
    assert stored(copied[0]) == stored(inserted[0]) == stored(one.id)
    job = Job.objects.get(id=copied[0])
    assert job.args["text"] == HOSTILE and job.args["inner"] == {"text": HOSTILE}
    assert (job.kind, job.tags, job.metadata["note"]) == (
        HOSTILE_OPTIONS["kind"],
        HOSTILE_OPTIONS["tags"],
        HOSTILE,
    )


def test_copy_ids_are_in_input_order() -> None:
    jobs: list[Any] = [CorePathOther(n=i) if i % 3 else CorePathJob(n=i) for i in range(200)]
    ids = awa_django.enqueue_many(jobs, queue="core-path")
    assert ids == sorted(ids) and len(set(ids)) == 200
    by_id = dict(Job.objects.filter(id__in=ids).values_list("id", "args"))
    assert [by_id[i]["n"] for i in ids] == list(range(200))
    kinds = dict(Job.objects.filter(id__in=ids).values_list("id", "kind"))
    assert kinds[ids[0]] == "core_path_job" and kinds[ids[1]] == "core_path_other"


def test_copy_takes_the_transaction_clock_and_keeps_run_at() -> None:
    when = timezone.now() + dt.timedelta(hours=2)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            now = cursor.fetchone()[0]
        now_ids = awa_django.enqueue_many([CorePathOther(n=i) for i in range(COPY_MIN_ROWS)])
        later_ids = awa_django.enqueue_many(
            [CorePathOther(n=i) for i in range(COPY_MIN_ROWS)], run_at=when
        )
    available = Job.objects.get(id=now_ids[-1])
    assert (available.state, available.run_at, available.created_at) == ("available", now, now)
    scheduled = Job.objects.get(id=later_ids[-1])
    assert (scheduled.state, scheduled.run_at, scheduled.created_at) == ("scheduled", when, now)


def test_copy_rolls_back_with_the_caller() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        ids = awa_django.enqueue_many([CorePathOther(n=i) for i in range(COPY_MIN_ROWS)])
        assert Job.objects.filter(id__in=ids).count() == COPY_MIN_ROWS
        raise RuntimeError("roll back")
    assert not Job.objects.filter(id__in=ids).exists()


def test_copy_inside_the_caller_transaction_opens_no_savepoint(statements: list[str]) -> None:
    with transaction.atomic():
        del statements[:]  # the caller's own SAVEPOINT (pytest-django holds a transaction)
        awa_django.enqueue_many([CorePathOther(n=i) for i in range(COPY_MIN_ROWS)])
        ours = list(statements)
    assert len(ours) == 1 and "nextval" in ours[0]  # then the COPY, which wrappers miss


def test_a_bad_job_among_many_writes_nothing_and_leaves_the_transaction_usable() -> None:
    jobs: list[Any] = [CorePathOther(n=i) for i in range(COPY_MIN_ROWS * 2)]
    jobs.append(CorePathOther(n=float("nan")))  # type: ignore[arg-type]
    with transaction.atomic():
        with pytest.raises(SerializationError, match="cannot be serialised"):
            awa_django.enqueue_many(jobs)
        assert not Job.objects.exists()
        awa_django.enqueue_many(jobs[:-1])  # the transaction still works
    assert Job.objects.count() == COPY_MIN_ROWS * 2


def test_a_circular_args_value_is_a_typed_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="Circular reference"):
        awa_django.enqueue_many([CorePathOther(n=loop)] * COPY_MIN_ROWS)  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match="Circular reference"):
        awa_django.enqueue(CorePathOther(n=loop))  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_copy_commits_on_its_own_in_autocommit() -> None:
    ids = awa_django.enqueue_many([CorePathOther(n=i) for i in range(COPY_MIN_ROWS)])
    assert connection.get_autocommit() and not connection.in_atomic_block
    with psycopg.connect(**connection_kwargs("default", "awa-core-test-other")) as other:
        count = other.execute("SELECT count(*) FROM awa_jobs_hot WHERE id = ANY(%s)", [ids])
        assert count.fetchone() == (COPY_MIN_ROWS,)


@pytest.mark.django_db(transaction=True)
def test_copy_notifies_once_and_only_on_commit() -> None:
    listener = Listener("awa:core-path")
    try:
        with transaction.atomic():
            awa_django.enqueue_many([CorePathOther(n=i) for i in range(200)], queue="core-path")
            listener.assert_nothing_pending("awa:core-path")  # not before commit
        notify = listener.next()
        assert notify is not None and (notify.channel, notify.payload) == ("awa:core-path", "")
        listener.assert_nothing_pending("awa:core-path")  # one NOTIFY for 200 jobs
        with pytest.raises(RuntimeError), transaction.atomic():
            awa_django.enqueue_many([CorePathOther(n=i) for i in range(200)], queue="core-path")
            raise RuntimeError("roll back")
        listener.assert_nothing_pending("awa:core-path")
        awa_django.enqueue_many(
            [CorePathOther(n=i) for i in range(200)],
            queue="core-path",
            run_at=timezone.now() + dt.timedelta(hours=1),
        )
        listener.assert_nothing_pending("awa:core-path")  # scheduled: promotion wakes it
    finally:
        listener.close()


# -- prepared statements on Django's connection -------------------------------------------
def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_enqueue_is_one_prepared_statement(statements: list[str]) -> None:
    awa_django.enqueue(CorePathOther(n=0))
    del statements[:]
    awa_django.enqueue(CorePathOther(n=1))
    assert len(statements) == 1  # no savepoint, no extra SELECT
    if keeps_prepared(connection.alias):
        assert any("INSERT INTO awa_jobs_hot" in sql for sql in prepared_statements())


def test_the_application_queries_stay_unprepared() -> None:
    awa_django.enqueue(CorePathOther(n=0))
    assert connection.connection.prepare_threshold is None  # Django's default kept
    for _ in range(10):  # psycopg would prepare it after 5 under its own default
        list(Job.objects.filter(queue="core-never").values_list("id"))
    assert not any(
        "core-never" in sql or '"awa_jobs_hot"."queue"' in sql for sql in prepared_statements()
    )


def test_behind_a_transaction_pooler_nothing_is_prepared(
    statements: list[str], settings_dict: dict[str, Any]
) -> None:
    settings_dict["DISABLE_SERVER_SIDE_CURSORS"] = True
    assert not keeps_prepared(connection.alias)
    before = prepared_statements()
    awa_django.enqueue(CorePathOther(n=1), queue="core-pooled")
    awa_django.enqueue_many([CorePathOther(n=1)], queue="core-pooled")
    assert prepared_statements() == before
    settings_dict["OPTIONS"] = {**settings_dict.get("OPTIONS", {}), "prepare_threshold": 5}
    assert keeps_prepared(connection.alias)  # PgBouncer >= 1.21 with prepared statements


@pytest.mark.django_db(transaction=True)  # closes the connection
def test_prepared_statements_share_one_cursor_per_connection(statements: list[str]) -> None:
    """Each single enqueue borrows the connection's one PreparingCursor (a new cursor
    looks its parameter dumpers up again); a new connection gets a cursor of its own."""
    if not keeps_prepared(connection.alias):
        pytest.skip("this connection keeps no prepared statements")
    awa_django.enqueue(CorePathOther(n=0))
    kept = getattr(connection, _KEPT)
    awa_django.enqueue(CorePathOther(n=1))
    awa_django.enqueue_many([CorePathOther(n=2), CorePathOther(n=3)])
    assert getattr(connection, _KEPT) is kept
    assert not kept.closed and not kept.lent
    assert len(statements) == 3  # Django's cursor wrapper still sees every statement

    connection.close()
    with transaction.atomic():
        row = awa_django.enqueue(CorePathOther(n=4))
    assert getattr(connection, _KEPT) is not kept
    assert getattr(connection, _KEPT).connection is connection.connection
    assert Job.objects.get(id=row.id).args == {"n": 4}


def test_an_enqueue_inside_another_statement_gets_a_cursor_of_its_own() -> None:
    """An execute wrapper that enqueues after another enqueue's statement ran, before its
    row is fetched: the inner one runs on a cursor made for it, so the outer one still
    reads its own row."""
    if not keeps_prepared(connection.alias):
        pytest.skip("this connection keeps no prepared statements")
    awa_django.enqueue(CorePathOther(n=0))
    kept = getattr(connection, _KEPT)
    inner: list[JobSnapshot] = []
    entered: list[str] = []

    def audit(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        result = execute(sql, *args)
        # After the outer statement ran and before its rows are fetched.
        if not entered and "INSERT INTO awa_jobs_hot" in sql:
            entered.append(sql)
            inner.append(awa_django.enqueue(CorePathOther(n=99), queue="core-audit"))
        return result

    with connection.execute_wrapper(audit):
        outer = awa_django.enqueue(CorePathOther(n=1))
    client = awa_django.Client()
    assert outer == client.get_job(outer.id) and outer.args == {"n": 1}
    assert inner[0] == client.get_job(inner[0].id) and inner[0].queue == "core-audit"
    assert getattr(connection, _KEPT) is kept and not kept.lent


@pytest.fixture
def settings_dict() -> Iterator[dict[str, Any]]:
    """Django's settings of the default connection, restored after the test."""
    saved = dict(connection.settings_dict)
    try:
        yield connection.settings_dict
    finally:
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


# -- the row enqueue returns --------------------------------------------------------------
def test_enqueue_returns_the_row_the_database_holds() -> None:
    """The insert returns only what the database chose (id, run_at, created_at); the rest
    of the returned row is built from what was written, and must equal the stored one."""
    elsewhere = dt.timezone(dt.timedelta(hours=5, minutes=30))
    client = awa_django.Client()
    rows = [
        awa_django.enqueue(CorePathJob(n=1), **HOSTILE_OPTIONS),
        awa_django.enqueue(CorePathOther(n=2), run_at=timezone.now().astimezone(elsewhere)),
        awa_django.enqueue({"n": 3, "big": 10**30, "f": 0.1}, kind="core_path_dict"),
        awa_django.enqueue(CorePathOther(n=4), unique=awa_django.UniqueOpts()),
        client.enqueue_task({"args": [1]}, kind="core_path_task", django_task={"backend": "x"}),
    ]
    for row in rows:
        assert row == client.get_job(row.id)
        assert type(row.state) is str
