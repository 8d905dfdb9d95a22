"""The unique key and UniqueOpts without a database: Awa's byte layout (reference §8.1,
awa-model `unique.rs`), a golden key, serde_json's canonical JSON, the states mask and
the period bucket."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from blake3 import blake3
from hypothesis import given
from hypothesis import strategies as st

from awa_django.exceptions import InvalidEnqueueOption
from awa_django.unique import (
    DEFAULT_UNIQUE_STATES,
    EnqueueManyResult,
    UniqueOpts,
    canonical_json,
    key_for,
    rust_float,
    unique_key,
)

GOLDEN_ARGS = {"to": "a@b.com", "n": 1.5, "name": "Zoë", "tags": ["a", "b"]}
# How this value was obtained: the reference's algorithm written out by hand as bytes,
#   b"send_email" + b"\x00" + b"email"
#   + b"\x00" + '{"n":1.5,"name":"Zoë","tags":["a","b"],"to":"a@b.com"}'.encode()
#   + b"\x00" + (1000).to_bytes(8, "little", signed=True)
# hashed with the `blake3` package (bindings of the official BLAKE3 Rust crate, the one
# Awa uses), first 16 bytes in hex. test_the_golden_bytes_are_the_reference_layout
# re-derives it from those bytes; this constant pins it against any change of either.
GOLDEN_KEY = "7c92d82971fe707f2d3bb7ae39244e5d"


def test_the_golden_key() -> None:
    key = unique_key("send_email", queue="email", args=GOLDEN_ARGS, period_bucket=1000)
    assert key.hex() == GOLDEN_KEY


def test_the_golden_bytes_are_the_reference_layout() -> None:
    canonical = '{"n":1.5,"name":"Zoë","tags":["a","b"],"to":"a@b.com"}'.encode()
    data = (
        b"send_email"
        + b"\x00"
        + b"email"
        + b"\x00"
        + canonical
        + b"\x00"
        + (1000).to_bytes(8, "little", signed=True)
    )
    assert blake3(data).digest()[:16].hex() == GOLDEN_KEY


def test_blake3_is_the_real_blake3() -> None:
    # The official BLAKE3 test vector for the empty input.
    assert blake3(b"").hexdigest() == (
        "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    )


def test_each_part_is_hashed_only_when_given() -> None:
    assert unique_key("send_email") == blake3(b"send_email").digest()[:16]
    assert unique_key("send_email", queue="q") == blake3(b"send_email\x00q").digest()[:16]
    assert unique_key("k", args={}) == blake3(b"k\x00{}").digest()[:16]
    assert unique_key("k", period_bucket=-1) == blake3(b"k\x00" + b"\xff" * 8).digest()[:16]
    assert len({unique_key("k"), unique_key("k", queue=""), unique_key("k", args={})}) == 3


def test_canonical_json_is_serde_jsons() -> None:
    value = {"b": [1, 2**64, True, None, 0.5], "a": 'é\n\x01"\\/', "é": {}}
    assert canonical_json(value) == (
        '{"a":"é\\n\\u0001\\"\\\\/","b":[1,1.8446744073709552e19,true,null,0.5],"é":{}}'
    )
    assert canonical_json({"z": 1, "A": 2, "a": 3}) == '{"A":2,"a":3,"z":1}'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.1"),
        (100.0, "100.0"),
        (-12.5, "-12.5"),
        (-0.0, "-0.0"),
        (1e15, "1000000000000000.0"),
        (1e16, "1e16"),
        (2.5e20, "2.5e20"),
        (1e-4, "0.0001"),
        (1e-5, "0.00001"),  # Python: 1e-05
        (1e-6, "1e-6"),
        (1.5e-7, "1.5e-7"),
        (1.7976931348623157e308, "1.7976931348623157e308"),
        (5e-324, "5e-324"),
    ],
)
def test_floats_are_written_as_rust_writes_them(value: float, text: str) -> None:
    assert rust_float(value) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_rust_float_round_trips(value: float) -> None:
    assert float(rust_float(value)) == value
    assert math.copysign(1, float(rust_float(value))) == math.copysign(1, value)


def test_the_default_states_are_awas() -> None:
    assert UniqueOpts().states == DEFAULT_UNIQUE_STATES
    assert UniqueOpts().states_mask == "11111000"
    assert UniqueOpts(states=["waiting_external", "scheduled"]).states_mask == "10000001"
    assert UniqueOpts(states={"failed"}).states_mask == "00000100"


@pytest.mark.parametrize(
    "bad",
    [
        {"states": {"done"}},
        {"states": set()},
        {"states": "available"},
        {"by_period": 0},
        {"by_period": 1.5},
        {"by_period": True},
        {"by_args": 1},
    ],
)
def test_bad_options_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidEnqueueOption):
        UniqueOpts(**bad)  # type: ignore[arg-type]


def test_by_period_buckets_run_at_as_epoch_seconds_floor_divided() -> None:
    opts = UniqueOpts(by_period=3600)
    at = dt.datetime(2026, 1, 1, 10, 59, 59, 900000, tzinfo=dt.UTC)
    assert opts.period_bucket(at) == int(at.timestamp()) // 3600
    bucket = opts.period_bucket(at)
    assert bucket is not None and opts.period_bucket(at + dt.timedelta(seconds=1)) == bucket + 1
    assert UniqueOpts().period_bucket(at) is None


def test_key_for_covers_the_parts_its_options_name() -> None:
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    args = '{"to":"a@b.com","n":1}'

    def key(opts: UniqueOpts, queue: str = "q") -> bytes:
        return key_for(opts, kind="k", queue=queue, args_json=args, run_at=at)

    assert key(UniqueOpts()) == unique_key("k", args={"n": 1, "to": "a@b.com"})
    assert key(UniqueOpts(by_args=False, by_queue=True)) == unique_key("k", queue="q")
    assert key(UniqueOpts(by_queue=True)) != key(UniqueOpts(by_queue=True), queue="r")
    assert key(UniqueOpts(by_args=False, by_period=60)) == unique_key(
        "k", period_bucket=int(at.timestamp()) // 60
    )


def test_enqueue_many_result_names_ids_and_skipped_positions() -> None:
    result = EnqueueManyResult((5, None, 7, None))
    assert (result.ids, result.skipped) == ([5, 7], [1, 3])
