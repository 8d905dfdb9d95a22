"""`JobSnapshot.from_row` and `snapshot.assemble`, the hot paths that build a row without
the frozen dataclass's __init__: they must build the very object __init__ would, and leave
it as frozen."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django.snapshot import COLUMNS, JobSnapshot, assemble

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def values(**changes: Any) -> list[Any]:
    row = {
        "id": 7,
        "kind": "unit",
        "queue": "default",
        "args": {"n": 1},
        "state": "running",
        "priority": 2,
        "attempt": 1,
        "max_attempts": 25,
        "run_at": NOW,
        "created_at": NOW,
        "attempted_at": NOW,
        "finalized_at": None,
        "run_lease": 3 << 24,
        "errors": [],
        "metadata": {},
        "tags": ["a"],
        "progress": None,
        "callback_id": uuid.UUID(int=5),
        "callback_timeout_at": None,
        "result": None,
        "attempted_by": ["w1"],
        "django_task": None,
        "original_priority": None,
        **changes,
    }
    assert list(row) == list(COLUMNS), "a JobSnapshot field this test does not know"
    return list(row.values())


@given(
    job_id=st.integers(min_value=1, max_value=2**62),
    args=st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    result=st.none() | st.text(max_size=5) | st.integers(),
    original_priority=st.none() | st.integers(min_value=0, max_value=4),
)
def test_assemble_builds_what_init_builds(
    job_id: int, args: dict[str, int], result: object, original_priority: int | None
) -> None:
    columns = values(id=job_id, args=args, result=result, original_priority=original_priority)
    built = assemble(*columns)
    assert type(built) is JobSnapshot
    assert built == JobSnapshot(*columns)
    assert [getattr(built, name) for name in COLUMNS] == columns


def test_an_assembled_row_stays_frozen() -> None:
    built = assemble(*values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.state = "completed"  # type: ignore[misc]
    assert not hasattr(built, "__dict__")


def test_from_row_decodes_the_json_columns_it_is_given_as_text() -> None:
    text = values(args='{"n": 2}', errors="[]", metadata="{}", result='"ok"')
    row = JobSnapshot.from_row((*text, "an extra column the statement added"))
    assert row == JobSnapshot(*values(args={"n": 2}, errors=[], metadata={}, result="ok"))
