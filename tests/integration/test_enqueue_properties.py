"""Property-based tests of enqueue, enqueue_many and the codec against real PostgreSQL.

Hypothesis generates hostile inputs (kinds, tags, queues, priorities, run_at, metadata,
`after=` parents and policies, concurrency keys and args: NUL, lone surrogates, odd JSON,
deep nesting, huge strings). Every case must end in
success or a typed `AwaError`, never another exception, never a partial write; and the
caller's `transaction.atomic()` block must stay usable, i.e. no bad value reached SQL.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import awa_django
from awa_django.codec import dumps
from awa_django.conf import QUEUE_NAME_RE
from awa_django.exceptions import AwaError
from awa_django.storage.models import Job

pytestmark = pytest.mark.django_db

PROPERTIES = settings(
    max_examples=100,
    deadline=None,
    # The database fixture is set up once per test; each example rolls back its own writes.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass
class PropertyBlob:
    data: Any


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


# -- strategies ------------------------------------------------------------------------------
# Characters PostgreSQL refuses or that look like what it refuses, mixed into any text.
TRAPS = ["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\U0001f600", "\\ud800", "\\u0000"]
any_char = st.characters(exclude_categories=())  # surrogates (category Cs) included
text = st.lists(st.one_of(any_char, st.sampled_from(TRAPS)), max_size=12).map("".join)
long_text = st.integers(150, 260).map(lambda n: "k" * n)

# Kinds are prefixed: the django.tasks resolver imports a dotted kind's module, and a
# generated one must name no real module.
kinds = st.one_of(
    st.none(),
    st.just("zz_prop_kind"),
    st.sampled_from(["", 5, b"bytes"]),
    text.map(lambda t: "zz_prop_" + t),
    long_text.map(lambda t: "zz_prop_" + t),
)
queues = st.one_of(
    st.none(),
    st.just("default"),
    st.from_regex(QUEUE_NAME_RE, fullmatch=True),
    text,
    st.sampled_from(["", "default\n", "x" * 201, 7]),
)
numbers = st.one_of(
    st.none(),
    st.integers(1, 5),  # valid for both priority and max_attempts
    st.integers(-120, 1100),
    st.sampled_from([True, 1.5, "2", 2**70]),
)
tag_lists = st.one_of(
    st.just(()),
    st.lists(st.sampled_from(["vip", "eu", "b" * 200]), max_size=3),
    st.lists(st.one_of(text, long_text, st.integers()), max_size=22),
    st.sampled_from([None, "vip", ("a", "b"), {"vip"}]),
)
offsets = st.sampled_from(
    [dt.UTC, dt.timezone(dt.timedelta(hours=14)), dt.timezone(-dt.timedelta(hours=12))]
)
run_ats = st.one_of(
    st.none(),
    st.just(dt.datetime(2030, 1, 1, tzinfo=dt.UTC)),
    st.datetimes(timezones=offsets),
    st.datetimes(),  # naive
    st.sampled_from(["2030-01-01", dt.date(2030, 1, 1)]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(),  # nan and infinities included
    text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
odd_values = st.sampled_from(
    [nested(99), nested(101), nested(20_000), "x" * 300_000, 10**5000, {1, 2}, object()]
)
args_values = st.one_of(json_values, odd_values)
metadata_values = st.one_of(
    st.none(),
    st.dictionaries(text, json_values, max_size=3),
    st.dictionaries(text, st.one_of(json_values, odd_values), max_size=3),
    st.sampled_from([["list"], "text", 3]),
)


# -- helpers ---------------------------------------------------------------------------------
def as_json(value: Any) -> Any:
    """`value` through JSON with every number a float: jsonb keeps numbers as exact
    decimals, so 5.7e+16 reads back as the int 57360631427397030."""
    text = value if isinstance(value, str) else json.dumps(value)
    return json.loads(text, parse_int=float)


def attempt(call: Any) -> tuple[Any, AwaError | None]:
    """Run `call` in the caller's transaction; a typed error is an allowed outcome."""
    try:
        result = call()
    except AwaError as error:
        event(type(error).__name__)  # --hypothesis-show-statistics lists the outcomes
        return None, error
    event("success")
    return result, None


# -- properties ------------------------------------------------------------------------------
@PROPERTIES
@given(
    data=args_values,
    kind=kinds,
    queue=queues,
    priority=numbers,
    max_attempts=numbers,
    tags=tag_lists,
    run_at=run_ats,
    metadata=metadata_values,
)
def test_enqueue_succeeds_or_raises_a_typed_error_before_any_sql(**options: Any) -> None:
    data = options.pop("data")
    with transaction.atomic():
        row, error = attempt(lambda: awa_django.enqueue(PropertyBlob(data=data), **options))
        # Still usable: a value PostgreSQL refused would have aborted this transaction.
        jobs = list(Job.objects.values_list("id", "args"))
        if error is None:
            [(job_id, args)] = jobs
            assert (job_id, as_json(args)) == (row.id, as_json({"data": data}))
        else:
            assert jobs == []
        transaction.set_rollback(True)


@PROPERTIES
@given(
    jobs=st.lists(
        st.one_of(args_values.map(lambda d: PropertyBlob(data=d)), st.dictionaries(text, scalars)),
        max_size=5,
    ),
    kind=kinds,
    queue=queues,
    priority=numbers,
    tags=tag_lists,
    metadata=metadata_values,
)
def test_enqueue_many_writes_every_job_or_none(jobs: list[Any], **options: Any) -> None:
    with transaction.atomic():
        ids, error = attempt(lambda: awa_django.enqueue_many(jobs, **options))
        count = Job.objects.count()  # raises if the transaction was aborted
        assert count == (len(jobs) if error is None else 0)
        if error is None:
            assert len(ids) == len(jobs)
        transaction.set_rollback(True)


@PROPERTIES
@given(value=st.one_of(json_values, odd_values, st.dictionaries(text, json_values)))
def test_what_the_codec_accepts_postgresql_stores(value: Any) -> None:
    encoded, error = attempt(lambda: dumps(value, what="value", limit=256 * 1024))
    if error is not None:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb::text", [encoded])
        assert as_json(cursor.fetchone()[0]) == as_json(encoded)


# -- workflows and keys (decisions 043, 045) ------------------------------------------------
# A parent id: real ones (filled in by the test), missing ones, and what is no id at all.
parent_ids = st.one_of(
    st.just("parent"),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 2**63 - 1, 2**63, True, 1.5, "1", None, b"1"]),
)
afters = st.one_of(
    st.none(),
    st.lists(parent_ids, max_size=4),
    # Well-typed ids only, so the range is what decides: the edges of a bigint and beyond.
    st.lists(st.sampled_from(["parent", 10**12, 2**63 - 1, 2**63, 2**64]), min_size=1, max_size=3),
    st.lists(parent_ids, max_size=3).map(tuple),
    st.sampled_from(["1", 7, True, {"a": 1}, b"", range(1, 3)]),
)
policies = st.sampled_from(["cancel", "run", "discard", "Cancel", "", None, 1, "sometimes"])
concurrency_keys = st.one_of(
    st.none(), text, long_text, scalars, st.sampled_from([b"k", 10**300, ["k"], "😀" * 200])
)


@PROPERTIES
@given(after=afters, policy=policies, key=concurrency_keys)
def test_enqueue_after_and_keyed_succeeds_or_raises_a_typed_error_before_any_sql(
    after: Any, policy: Any, key: Any
) -> None:
    with transaction.atomic():
        parent = awa_django.enqueue(PropertyBlob(data=0)).id
        if isinstance(after, list | tuple):
            after = type(after)(parent if p == "parent" else p for p in after)
        options = {} if key is None else {"concurrency_key": key}
        _, error = attempt(
            lambda: awa_django.enqueue(
                PropertyBlob(data=1), after=after, on_parent_failure=policy, **options
            )
        )
        count = Job.objects.count()  # raises if the transaction was aborted
        assert count == (1 if error is not None else 2)
        transaction.set_rollback(True)
