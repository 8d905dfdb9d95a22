"""The hot-path statements pass arrays as PostgreSQL array literals
(storage/sql/arrays.py): whatever a list holds, PostgreSQL must read back exactly that
list, as it did when psycopg adapted the list itself."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.storage.sql.arrays import bytea_array, int_array, text_array, timestamptz_array

pytestmark = pytest.mark.django_db

PROPERTIES = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

# Any text PostgreSQL can store (every character UTF-8 can encode, so no lone surrogates,
# but NUL), with the array syntax's own characters and words mixed in.
SYNTAX = ['"', "\\", ",", "{", "}", " ", "NULL", "null", "\t", "\n", "'", "\\x"]
stored_char = st.characters(codec="utf-8", exclude_characters="\x00")
stored_text = st.lists(st.one_of(stored_char, st.sampled_from(SYNTAX)), max_size=12).map("".join)


def read_back(literal: str, sql_type: str) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT %s::{sql_type}", [literal])
        return cursor.fetchone()[0]


@PROPERTIES
@given(st.lists(st.one_of(st.none(), stored_text), max_size=8))
def test_a_text_array_reads_back_as_the_list(values: list[str | None]) -> None:
    assert read_back(text_array(values), "text[]") == values


@PROPERTIES
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8))
def test_an_int_array_reads_back_as_the_list(values: list[int]) -> None:
    assert read_back(int_array(values), "int8[]") == values


@PROPERTIES
@given(st.lists(st.one_of(st.none(), st.binary(max_size=16)), max_size=6))
def test_a_bytea_array_reads_back_as_the_list(values: list[bytes | None]) -> None:
    assert read_back(bytea_array(values), "bytea[]") == values


@PROPERTIES
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.datetimes(
                min_value=dt.datetime(1970, 1, 1),
                max_value=dt.datetime(2200, 1, 1),
                timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30))]),
            ),
        ),
        max_size=6,
    )
)
def test_a_timestamptz_array_reads_back_as_the_same_instants(
    values: list[dt.datetime | None],
) -> None:
    assert read_back(timestamptz_array(values), "timestamptz[]") == values


def test_an_empty_list_is_an_empty_array() -> None:
    assert read_back(text_array([]), "text[]") == []
    assert read_back(int_array([]), "int8[]") == []
