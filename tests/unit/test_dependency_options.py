"""The checks of `after=` and `on_parent_failure=` (options.py, decision 043): pure, run
before any SQL, so every bad value is a typed InvalidDependency and a good one comes back
as sorted distinct ids."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django.exceptions import InvalidDependency, InvalidEnqueueOption
from awa_django.options import MAX_PARENTS, check_parent_failure, check_parents
from awa_django.snapshot import JobSnapshot
from awa_django.states import ParentFailurePolicy


def snapshot(job_id: int) -> JobSnapshot:
    now = dt.datetime.now(dt.UTC)
    return JobSnapshot(
        job_id, "k", "q", {}, "available", 2, 0, 25, now, now, None, None, 0, [], {}, [],
        None, None, None, None, [],
    )  # fmt: skip


@given(st.lists(st.integers(1, 2**62), min_size=1, max_size=50))
def test_ids_come_back_sorted_and_distinct(ids: list[int]) -> None:
    assert check_parents(ids) == tuple(sorted(set(ids)))


def test_snapshots_and_ids_mix() -> None:
    assert check_parents([snapshot(9), 3, snapshot(3)]) == (3, 9)


JUNK = st.one_of(
    st.floats(), st.text(), st.booleans(), st.none(), st.integers(max_value=0),
    st.dictionaries(st.text(), st.integers()),
)  # fmt: skip


@given(st.lists(st.integers(1, 100), max_size=5), JUNK, st.lists(st.integers(1, 100), max_size=5))
def test_any_junk_among_the_parents_is_a_typed_error(
    before: list[int], junk: Any, after: list[int]
) -> None:
    with pytest.raises(InvalidDependency):
        check_parents([*before, junk, *after])


@pytest.mark.parametrize("after", [[], (), 7, "1,2", None, {1: 2}, snapshot(1)])
def test_not_a_list_of_parents_is_a_typed_error(after: Any) -> None:
    with pytest.raises(InvalidDependency):
        check_parents(after)


def test_the_parent_bound() -> None:
    assert len(check_parents(list(range(1, MAX_PARENTS + 1)))) == MAX_PARENTS
    with pytest.raises(InvalidDependency, match="10,000"):
        check_parents(list(range(1, MAX_PARENTS + 2)))


@given(st.one_of(st.text(), st.integers(), st.none()))
def test_a_policy_is_one_of_three_words(policy: Any) -> None:
    if policy in ("cancel", "run", "discard"):
        assert check_parent_failure(policy) is ParentFailurePolicy(policy)
    else:
        with pytest.raises(InvalidDependency):
            check_parent_failure(policy)


def test_invalid_dependency_is_an_enqueue_option_error() -> None:
    assert issubclass(InvalidDependency, InvalidEnqueueOption)
