"""Integration tests of enqueue (`awa_django.enqueue`, `enqueue_many`, `aenqueue`) on real
PostgreSQL: the stored row, transactional visibility, the wake-up NOTIFY, and typed errors
for bad input with nothing written."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

import awa_django
from awa_django.channels import channel_for
from awa_django.exceptions import (
    AwaError,
    InvalidEnqueueOption,
    InvalidQueueName,
    PayloadTooLarge,
    SerializationError,
    UnknownJobKind,
)
from awa_django.storage.models import Job
from tests.listening import Listener

pytestmark = pytest.mark.django_db


@dataclass
class CoreEnqueueMail:
    to: str
    lines: list[str] = field(default_factory=list)


@awa_django.job(CoreEnqueueMail, queue="core-mail", priority=3, max_attempts=5)
def core_enqueue_mail(job: awa_django.JobContext[CoreEnqueueMail]) -> None:
    return None


@dataclass
class CoreEnqueuePlain:
    n: int


@dataclass
class CoreEnqueueBlob:
    data: Any


@pytest.fixture
def listen() -> Iterator[Any]:
    opened: list[Listener] = []

    def start(*channels: str) -> Listener:
        opened.append(Listener(*channels))
        return opened[-1]

    yield start
    for listener in opened:
        listener.close()


# -- the stored row -----------------------------------------------------------------------
def test_enqueue_stores_the_row_with_registration_defaults() -> None:
    row = awa_django.enqueue(CoreEnqueueMail(to="a@b.c", lines=["x"]))
    job = Job.objects.get(id=row.id)
    assert (job.kind, job.queue, job.priority, job.max_attempts) == (
        "core_enqueue_mail",
        "core-mail",
        3,
        5,
    )
    assert (job.state, job.attempt, job.run_lease) == ("available", 0, 0)
    assert job.args == {"to": "a@b.c", "lines": ["x"]}
    assert (job.errors, job.metadata, job.tags, job.progress) == ([], {}, [], None)
    assert job.finalized_at is None and job.attempted_at is None
    assert job.run_at == job.created_at  # both now() of this transaction
    assert row.id == job.id and row.state == "available" and row.args == job.args


def test_explicit_options_override_the_registration() -> None:
    row = awa_django.enqueue(
        CoreEnqueueMail(to="x"),
        queue="core-other",
        priority=1,
        max_attempts=2,
        tags=["vip", "eu"],
        metadata={"trace": "abc", "n": 1},
    )
    job = Job.objects.get(id=row.id)
    assert (job.queue, job.priority, job.max_attempts) == ("core-other", 1, 2)
    assert (job.tags, job.metadata) == (["vip", "eu"], {"trace": "abc", "n": 1})
    assert (row.tags, row.metadata) == (["vip", "eu"], {"trace": "abc", "n": 1})


def test_unregistered_args_use_the_global_defaults() -> None:
    row = awa_django.enqueue(CoreEnqueuePlain(n=1))
    assert (row.kind, row.queue, row.priority, row.max_attempts) == (
        "core_enqueue_plain",
        "default",
        2,
        25,
    )


def test_a_dict_needs_an_explicit_kind() -> None:
    row = awa_django.enqueue({"legacy": True}, kind="core_enqueue_legacy")
    assert (row.kind, row.args) == ("core_enqueue_legacy", {"legacy": True})
    with pytest.raises(UnknownJobKind, match="explicit kind"):
        awa_django.enqueue({"legacy": True})
    with pytest.raises(UnknownJobKind, match="explicit kind"):
        awa_django.enqueue_many([{"legacy": True}])


def test_enqueue_many_of_dicts_takes_kind_for_every_job() -> None:
    ids = awa_django.enqueue_many([{"n": 1}, {"n": 2}], kind="core_enqueue_legacy")
    rows = Job.objects.filter(id__in=ids).order_by("id").values_list("kind", "args")
    assert list(rows) == [("core_enqueue_legacy", {"n": 1}), ("core_enqueue_legacy", {"n": 2})]


@pytest.mark.parametrize("jobs", [CoreEnqueuePlain(n=1), {"n": 1}, "abc", 42])
def test_enqueue_many_of_something_not_a_list_of_jobs_is_refused(jobs: Any) -> None:
    with pytest.raises(InvalidEnqueueOption, match="iterable of args"):
        awa_django.enqueue_many(jobs)


def test_job_declarations_are_checked_with_the_enqueue_ranges() -> None:
    # Declared defaults must fail at import, not on every enqueue of the kind.
    for bad in ({"priority": 500}, {"priority": -99}, {"max_attempts": 0}, {"kind": ""}):
        with pytest.raises(InvalidEnqueueOption):
            awa_django.job(CoreEnqueuePlain, **bad)
    with pytest.raises(InvalidQueueName):
        awa_django.job(CoreEnqueuePlain, queue="no spaces")


@pytest.mark.parametrize("delta", [dt.timedelta(hours=1), dt.timedelta(hours=-1)])
def test_run_at_makes_the_job_scheduled(delta: dt.timedelta) -> None:
    # Even a past run_at is `scheduled` (T2): promotion makes it available.
    when = timezone.now() + delta
    row = awa_django.enqueue(CoreEnqueuePlain(n=1), run_at=when)
    job = Job.objects.get(id=row.id)
    assert (job.state, job.run_at) == ("scheduled", when)


def test_rollback_of_the_enclosing_transaction_leaves_no_job() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        row = awa_django.enqueue(CoreEnqueuePlain(n=1))
        assert Job.objects.filter(id=row.id).exists()
        raise RuntimeError("roll back")
    assert not Job.objects.filter(id=row.id).exists()


# -- wake-up NOTIFY -----------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_notify_is_delivered_only_after_commit(listen: Any) -> None:
    listener = listen("awa:core-notify")
    with transaction.atomic():
        awa_django.enqueue(CoreEnqueuePlain(n=1), queue="core-notify")
        listener.assert_nothing_pending("awa:core-notify")  # not before commit
    notify = listener.next()
    assert notify is not None and (notify.channel, notify.payload) == ("awa:core-notify", "")


@pytest.mark.django_db(transaction=True)
def test_rollback_sends_no_notify(listen: Any) -> None:
    listener = listen("awa:core-notify")
    with pytest.raises(RuntimeError), transaction.atomic():
        awa_django.enqueue(CoreEnqueuePlain(n=1), queue="core-notify")
        raise RuntimeError("roll back")
    listener.assert_nothing_pending("awa:core-notify")
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_scheduled_job_sends_no_notify(listen: Any) -> None:
    listener = listen("awa:core-notify")
    awa_django.enqueue(
        CoreEnqueuePlain(n=1), queue="core-notify", run_at=timezone.now() + dt.timedelta(hours=1)
    )
    listener.assert_nothing_pending("awa:core-notify")


@pytest.mark.django_db(transaction=True)
def test_long_queue_name_notifies_on_a_hashed_channel(listen: Any) -> None:
    queue = "q" * 150
    channel = channel_for(queue)
    assert len(channel.encode()) <= 63
    listener = listen(channel)
    row = awa_django.enqueue(CoreEnqueuePlain(n=1), queue=queue)
    notify = listener.next()
    assert notify is not None and notify.channel == channel
    assert Job.objects.get(id=row.id).queue == queue
    ids = awa_django.enqueue_many([CoreEnqueuePlain(n=2)], queue=queue)
    notify = listener.next()
    assert notify is not None and notify.channel == channel and len(ids) == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_notifies_each_queue_once(listen: Any) -> None:
    listener = listen("awa:core-bulk")
    with transaction.atomic():
        awa_django.enqueue_many([CoreEnqueuePlain(n=i) for i in range(50)], queue="core-bulk")
        listener.assert_nothing_pending("awa:core-bulk")
    notify = listener.next()
    assert notify is not None and notify.channel == "awa:core-bulk"
    listener.assert_nothing_pending("awa:core-bulk")  # one NOTIFY for 50 jobs


# -- bad input: typed errors and nothing written ------------------------------------------
def nested(depth: int) -> list[Any]:
    """A list `depth` levels deep: [[[...]]]."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


BAD_OPTIONS: list[tuple[dict[str, Any], type[AwaError]]] = [
    ({"queue": "has space"}, InvalidQueueName),
    ({"queue": "x" * 201}, InvalidQueueName),
    ({"queue": "default\n"}, InvalidQueueName),
    ({"queue": "semi;colon"}, InvalidQueueName),
    ({"priority": 103}, InvalidEnqueueOption),
    ({"priority": -99}, InvalidEnqueueOption),
    ({"priority": 1.5}, InvalidEnqueueOption),
    ({"priority": "1"}, InvalidEnqueueOption),
    ({"max_attempts": 0}, InvalidEnqueueOption),
    ({"max_attempts": 1001}, InvalidEnqueueOption),
    ({"max_attempts": "3"}, InvalidEnqueueOption),
    ({"tags": "vip"}, InvalidEnqueueOption),
    ({"tags": [f"t{i}" for i in range(21)]}, InvalidEnqueueOption),
    ({"tags": [""]}, InvalidEnqueueOption),
    ({"tags": ["x" * 201]}, InvalidEnqueueOption),
    ({"tags": [1]}, InvalidEnqueueOption),
    ({"run_at": dt.datetime(2030, 1, 1)}, InvalidEnqueueOption),
    ({"run_at": dt.date(2030, 1, 1)}, InvalidEnqueueOption),
    ({"metadata": {"x": object()}}, SerializationError),
    # Each of these reached PostgreSQL before, whose refusal aborted the caller's transaction.
    ({"queue": ""}, InvalidQueueName),
    ({"kind": ""}, InvalidEnqueueOption),
    ({"kind": 5}, InvalidEnqueueOption),
    ({"kind": "k" * 201}, InvalidEnqueueOption),
    ({"kind": "a\x00b"}, InvalidEnqueueOption),
    ({"kind": "lone \ud800"}, InvalidEnqueueOption),
    ({"tags": ["a\x00"]}, InvalidEnqueueOption),
    ({"tags": ["lone \udfff"]}, InvalidEnqueueOption),
    (
        {"run_at": dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=5)))},
        InvalidEnqueueOption,
    ),
    (
        {"run_at": dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5)))},
        InvalidEnqueueOption,
    ),
    ({"metadata": ["not", "a", "dict"]}, InvalidEnqueueOption),
    ({"metadata": {"who": "lone \ud800"}}, SerializationError),
    ({"metadata": {"who": "nul \x00"}}, SerializationError),
    ({"metadata": {"deep": nested(101)}}, SerializationError),
]


@pytest.mark.parametrize(("options", "error"), BAD_OPTIONS)
def test_bad_options_raise_typed_errors_and_write_nothing(
    options: dict[str, Any], error: type[AwaError]
) -> None:
    with transaction.atomic():
        with pytest.raises(error):
            awa_django.enqueue(CoreEnqueuePlain(n=1), **options)
        with pytest.raises(error):
            awa_django.enqueue_many([CoreEnqueuePlain(n=1), CoreEnqueuePlain(n=2)], **options)
        assert not Job.objects.exists()  # and the caller's transaction is still usable


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(object(), id="object"),
        pytest.param({1, 2}, id="set"),
        pytest.param(float("nan"), id="nan"),
        pytest.param("nul\x00char", id="nul"),
        pytest.param("lone \ud800 surrogate", id="high-surrogate"),
        pytest.param("\udc00", id="low-surrogate"),
        pytest.param({"key \udfff": 1}, id="surrogate-in-key"),
        pytest.param(["ok \U0001f600", "\ud83d"], id="half-an-emoji"),
        pytest.param(nested(101), id="101-deep"),
        pytest.param(nested(20_000), id="20000-deep"),  # beyond Python's recursion limit
        pytest.param(10**5000, id="5000-digits"),  # more than Python turns into text
    ],
)
def test_args_that_json_cannot_hold_raise_serialization_error(data: Any) -> None:
    with transaction.atomic():
        with pytest.raises(SerializationError):
            awa_django.enqueue(CoreEnqueueBlob(data=data))
        with pytest.raises(SerializationError):
            awa_django.enqueue_many([CoreEnqueueBlob(data=1), CoreEnqueueBlob(data=data)])
        assert not Job.objects.exists()  # and the caller's transaction is still usable


@pytest.mark.parametrize(
    "data",
    [
        pytest.param("\U0001f600 emoji", id="emoji"),
        pytest.param("\\ud800 looks like an escape", id="escape-lookalike"),
        pytest.param(nested(99), id="100-deep"),  # the args object is the 100th level
        pytest.param("[" * 500, id="brackets-in-text"),
    ],
)
def test_unusual_args_that_postgresql_can_hold_are_stored(data: Any) -> None:
    row = awa_django.enqueue(CoreEnqueueBlob(data=data))
    assert Job.objects.get(id=row.id).args == {"data": data}


def test_error_messages_say_what_is_wrong() -> None:
    with pytest.raises(SerializationError, match="lone surrogate"):
        awa_django.enqueue(CoreEnqueueBlob(data="\ud800"))
    with pytest.raises(SerializationError, match="more than 100 levels deep"):
        awa_django.enqueue(CoreEnqueueBlob(data=nested(20_000)))
    with pytest.raises(InvalidEnqueueOption, match="the limit is 200"):
        awa_django.enqueue({}, kind="k" * 201)
    with pytest.raises(InvalidEnqueueOption, match="NUL"):
        awa_django.enqueue(CoreEnqueuePlain(n=1), tags=["a\x00"])


def test_text_that_merely_looks_like_a_nul_escape_is_stored() -> None:
    row = awa_django.enqueue(CoreEnqueueBlob(data="C:\\temp\\u0000.log"))
    assert Job.objects.get(id=row.id).args == {"data": "C:\\temp\\u0000.log"}


def test_args_must_be_a_dataclass_instance() -> None:
    with pytest.raises(SerializationError):
        awa_django.enqueue(42, kind="core_enqueue_number")
    assert not Job.objects.exists()


@override_settings(AWA={"MAX_ARGS_BYTES": 100})
def test_args_over_the_configured_limit_raise_payload_too_large() -> None:
    awa_django.enqueue(CoreEnqueueBlob(data="x" * 80))  # 91 bytes of JSON: fits
    with pytest.raises(PayloadTooLarge, match="the limit is 100"):
        awa_django.enqueue(CoreEnqueueBlob(data="x" * 100))
    with pytest.raises(PayloadTooLarge):
        awa_django.enqueue_many([CoreEnqueueBlob(data=1), CoreEnqueueBlob(data="x" * 100)])
    assert Job.objects.count() == 1


# -- enqueue_many -------------------------------------------------------------------------
def test_enqueue_many_inserts_5000_jobs_in_one_statement_in_input_order(
    django_assert_num_queries: Any,
) -> None:
    jobs = [CoreEnqueuePlain(n=i) for i in range(5000)]
    with django_assert_num_queries(1):
        ids = awa_django.enqueue_many(jobs, tags=["bulk"])
    assert len(ids) == len(set(ids)) == 5000
    stored = dict(Job.objects.values_list("id", "args"))
    assert [stored[i]["n"] for i in ids] == list(range(5000))
    shapes = {
        (state, tuple(tags), kind)
        for state, tags, kind in Job.objects.values_list("state", "tags", "kind")
    }
    assert shapes == {("available", ("bulk",), "core_enqueue_plain")}


def test_enqueue_many_mixes_kinds_with_their_own_defaults() -> None:
    ids = awa_django.enqueue_many([CoreEnqueueMail(to="a"), CoreEnqueuePlain(n=1)])
    mail, plain = (Job.objects.get(id=i) for i in ids)
    assert (mail.kind, mail.queue, mail.priority, mail.max_attempts) == (
        "core_enqueue_mail",
        "core-mail",
        3,
        5,
    )
    assert (plain.kind, plain.queue, plain.priority, plain.max_attempts) == (
        "core_enqueue_plain",
        "default",
        2,
        25,
    )


def test_enqueue_many_with_run_at_and_metadata() -> None:
    when = timezone.now() + dt.timedelta(minutes=5)
    ids = awa_django.enqueue_many(
        [CoreEnqueuePlain(n=1), CoreEnqueuePlain(n=2)], run_at=when, metadata={"m": 1}
    )
    rows = list(Job.objects.filter(id__in=ids).values_list("state", "run_at", "metadata", "tags"))
    assert rows == [("scheduled", when, {"m": 1}, [])] * 2


def test_enqueue_many_of_nothing_runs_no_query(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(0):
        assert awa_django.enqueue_many([]) == []


def test_enqueue_is_one_query(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(1):
        awa_django.enqueue(CoreEnqueuePlain(n=1))


def test_enqueue_many_rollback_leaves_nothing() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        awa_django.enqueue_many([CoreEnqueuePlain(n=i) for i in range(10)])
        raise RuntimeError("roll back")
    assert not Job.objects.exists()


# -- async --------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_aenqueue_and_aenqueue_many_from_async_code() -> None:
    async def produce() -> tuple[int, list[int]]:
        row = await awa_django.aenqueue(CoreEnqueueMail(to="async"), tags=["a"])
        ids = await awa_django.aenqueue_many([CoreEnqueuePlain(n=1), CoreEnqueuePlain(n=2)])
        # The async twins ran in asgiref's sync thread: close its connection there.
        await sync_to_async(connections.close_all)()
        return row.id, ids

    one, many = asyncio.run(produce())
    job = Job.objects.get(id=one)
    assert (job.kind, job.queue, job.tags, job.args) == (
        "core_enqueue_mail",
        "core-mail",
        ["a"],
        {"to": "async", "lines": []},
    )
    assert sorted(Job.objects.filter(id__in=many).values_list("args__n", flat=True)) == [1, 2]
