"""Property-based: whatever a caller passes to `JobFilter` and the bulk verbs' arguments,
the filter either builds or raises a typed AwaError, and a built filter never reaches SQL
with a value PostgreSQL refuses (issue 26: a NUL, a lone surrogate or a value too long
for its column used to fail in the driver or the database)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from awa_django.bulk import BulkAction, JobFilter
from awa_django.client import Client
from awa_django.exceptions import AwaError, InvalidJobFilter, InvalidQueueName
from awa_django.states import JobState
from awa_django.storage.models import BulkOperation, Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

HOSTILE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NASTY = ["\x00", "\ud800", "\udcff", "\\", "'", "%", "_", "²", "😀", " ", ":", "x" * 199]
# Joined lists, not st.text(): st.text() leaves surrogates out.
texts = st.lists(st.sampled_from(NASTY) | st.characters(), min_size=0, max_size=6).map("".join)
names = st.from_regex(r"[a-z0-9_.:\-]{1,20}", fullmatch=True)


def mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    """`common` three times as often as `rare`: most examples get past the checks to SQL."""
    return st.sampled_from([common] * 3 + [rare]).flatmap(lambda chosen: chosen)


numbers = st.one_of(
    st.integers(-(10**25), 10**25), st.floats(allow_nan=True), st.booleans(), st.none(), texts
)
field_values = {
    "queue": mostly(st.none() | names, texts),
    "kind": mostly(st.none() | names, texts),
    "states": st.lists(mostly(st.sampled_from(JobState.values), texts), max_size=3).map(tuple),
    "tags": mostly(st.lists(names, max_size=3).map(tuple), st.lists(texts).map(tuple) | numbers),
    "created_after": mostly(
        st.none() | st.datetimes(timezones=st.timezones()), st.datetimes(timezones=st.none())
    ),
    "finalized_before": st.none() | st.datetimes(timezones=st.just(dt.UTC)),
}
filters = st.fixed_dictionaries({}, optional=field_values)


@HOSTILE
@given(
    fields=filters,
    action=st.sampled_from(list(BulkAction)),
    priority=mostly(st.integers(-98, 102), st.integers(-200, 200) | numbers),
    target=mostly(names, texts | st.none()),
    chunk_size=mostly(st.integers(1, 10_000), st.integers(-5, 20_000) | numbers),
    busy=mostly(st.floats(0.01, 1), st.floats(-1, 2) | numbers),
)
def test_a_filter_builds_or_raises_a_typed_error_and_never_fails_in_sql(
    fields: dict[str, Any],
    action: BulkAction,
    priority: Any,
    target: Any,
    chunk_size: Any,
    busy: Any,
) -> None:
    try:
        where = JobFilter(**fields)
    except (InvalidJobFilter, InvalidQueueName):
        return
    try:
        # The dry run checks what the run checks; any error is a typed one, raised before
        # SQL: a bad value reaching PostgreSQL would raise a DataError (or psycopg's
        # UnicodeEncodeError) instead.
        count = Client().bulk_dry_run(
            action, where, priority=priority, target_queue=target,
            chunk_size=chunk_size, busy_fraction=busy,
        )  # fmt: skip
    except AwaError:
        return
    event("counted")
    assert count >= 0


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "a\x00"},
        {"kind": "\ud800"},
        {"tags": 5},
        {"tags": ("a\x00",)},
        {"queue": "a\x00"},
        {"kind": "k" * 201},
    ],
)
def test_the_reported_values_are_refused_before_any_sql(
    fields: dict[str, Any], django_assert_num_queries: Any
) -> None:
    JobFactory(state="failed")
    with django_assert_num_queries(0), pytest.raises((InvalidJobFilter, InvalidQueueName)):
        Client().bulk_retry(JobFilter(**fields))
    assert not BulkOperation.objects.exists()
    assert Job.objects.get().state == "failed"
