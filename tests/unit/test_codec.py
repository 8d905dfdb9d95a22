"""Unit tests of the args codec (`awa_django.codec`): JSON encoding limits and errors, and
decoding stored args back into their dataclass with clear `InvalidJobArgs` messages."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django.codec import (
    decode_args,
    dumps,
    encode_args,
    encode_args_json,
    unstorable_character,
)
from awa_django.exceptions import InvalidJobArgs, PayloadTooLarge, SerializationError


@dataclass
class CoreCodecArgs:
    order_id: int
    email: str
    amount: float = 0.0
    urgent: bool = False
    lines: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    note: str | None = None


# -- dumps --------------------------------------------------------------------------------
def test_dumps_is_compact_json() -> None:
    assert dumps({"a": [1, 2], "b": "x"}, what="args") == '{"a":[1,2],"b":"x"}'


def test_dumps_keeps_unicode_round_trip() -> None:
    text = dumps({"name": "Zoë ☃"}, what="args")
    assert json.loads(text) == {"name": "Zoë ☃"}


@pytest.mark.parametrize("value", [{"x": object()}, {"x": {1, 2}}, {"x": b"bytes"}])
def test_dumps_rejects_values_json_cannot_hold(value: Any) -> None:
    with pytest.raises(SerializationError, match="args of thing cannot be serialised"):
        dumps(value, what="args of thing")


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_dumps_rejects_non_finite_floats(number: float) -> None:
    # PostgreSQL's jsonb has no NaN/Infinity: they must fail here, not at INSERT.
    with pytest.raises(SerializationError):
        dumps({"x": number}, what="args")


def test_dumps_rejects_nul_characters() -> None:
    with pytest.raises(SerializationError, match="NUL"):
        dumps({"x": "a\x00b"}, what="args")


@pytest.mark.parametrize("text", ["\\u0000", "C:\\users\\u0000.txt", "\\\\u0000"])
def test_dumps_accepts_a_literal_backslash_u0000(text: str) -> None:
    # Only a real NUL is a problem; the six characters `\u0000` are ordinary text.
    assert json.loads(dumps({"x": text}, what="args"))["x"] == text


@pytest.mark.parametrize("text", ["\x00", "\\\x00", "\\\\\x00", "ok\x00"])
def test_dumps_rejects_nul_after_backslashes(text: str) -> None:
    with pytest.raises(SerializationError, match="NUL"):
        dumps({"x": text}, what="args")


@pytest.mark.parametrize(
    "text", ["\ud800", "a\udfffb", "\ude00\ud83d", "\ud83d\ud83d", "\\\ud800", "😀\udbff"]
)
def test_dumps_rejects_lone_surrogates(text: str) -> None:
    # jsonb refuses them (and UTF-8 cannot encode them): here, not at INSERT, not as a 500.
    with pytest.raises(SerializationError, match="lone surrogate"):
        dumps({"x": text}, what="args")
    with pytest.raises(SerializationError, match="lone surrogate"):
        encode_args_json({"x": text}, what="args")
    with pytest.raises(SerializationError, match="lone surrogate"):
        dumps({text: 1}, what="args")  # keys too


@pytest.mark.parametrize("text", ["😀", "\ud83d\ude00", "\\ud800", "C:\\udp\\ud800.txt"])
def test_dumps_accepts_pairs_and_the_literal_text_backslash_ud800(text: str) -> None:
    # A high+low pair is one character; the six characters `\ud800` are ordinary text.
    assert dumps({"x": text}, what="args")


# Text built from the characters that matter here: backslashes, "u", "d", hex digits and
# surrogates of both halves, plus an astral character and plain ASCII.
_TRICKY = st.text(
    st.sampled_from(["\\", "u", "d", "8", "c", "0", "f", "a", "\ud83d", "\ude00", "\udbff", "😀"])
    | st.characters(max_codepoint=0x7F),
    max_size=12,
)


@given(_TRICKY)
def test_dumps_refuses_exactly_what_postgresql_cannot_store(text: str) -> None:
    # NUL and lone surrogates, nothing else. Adjacent high+low code points in a str become
    # one valid pair in JSON, so the truth is what the JSON decodes back to, checked the
    # slow, obvious way.
    decoded = json.loads(json.dumps(text))
    unstorable = any(c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF for c in decoded)
    try:
        dumps(text, what="args")
    except SerializationError:
        assert unstorable
    else:
        assert not unstorable


def test_dumps_reports_nesting_too_deep_to_encode() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(SerializationError, match="more than 100 levels deep"):
        dumps(value, what="payload")


@pytest.mark.parametrize(
    ("text", "problem"),
    [("ok", None), ("😀", None), ("a\x00", "a NUL character"), ("\udc00", "a lone surrogate")],
)
def test_unstorable_character_names_the_problem(text: str, problem: str | None) -> None:
    assert unstorable_character(text) == problem


def test_dumps_limit_is_inclusive() -> None:
    text = dumps({"x": "y" * 10}, what="args")
    assert dumps({"x": "y" * 10}, what="args", limit=len(text)) == text
    with pytest.raises(PayloadTooLarge, match=f"is {len(text)} bytes of JSON; the limit is"):
        dumps({"x": "y" * 10}, what="args", limit=len(text) - 1)


def test_serialization_errors_are_awa_errors() -> None:
    from awa_django.exceptions import AwaError

    assert issubclass(SerializationError, AwaError)
    assert issubclass(PayloadTooLarge, AwaError)


# -- encode_args --------------------------------------------------------------------------
def test_encode_args_of_a_dataclass_is_a_dict() -> None:
    args = CoreCodecArgs(order_id=1, email="a@b.c", lines=[1, 2])
    assert encode_args(args) == {
        "order_id": 1,
        "email": "a@b.c",
        "amount": 0.0,
        "urgent": False,
        "lines": [1, 2],
        "extra": {},
        "note": None,
    }


def test_encode_args_passes_a_dict_through() -> None:
    assert encode_args({"a": 1}) == {"a": 1}


@pytest.mark.parametrize("bad", [CoreCodecArgs, 42, "text", [1, 2], None])
def test_encode_args_rejects_anything_else(bad: Any) -> None:
    with pytest.raises(SerializationError, match="must be a dataclass instance"):
        encode_args(bad)


# -- decode_args --------------------------------------------------------------------------
def test_decode_round_trips_a_dataclass() -> None:
    args = CoreCodecArgs(order_id=7, email="x@y.z", amount=2.5, urgent=True, lines=[3])
    stored = json.loads(dumps(encode_args(args), what="args"))
    assert decode_args(CoreCodecArgs, stored) == args


def test_decode_without_a_type_returns_the_raw_value() -> None:
    assert decode_args(None, {"a": 1}) == {"a": 1}


def test_decode_accepts_an_int_for_a_float_field() -> None:
    assert decode_args(CoreCodecArgs, {"order_id": 1, "email": "e", "amount": 3}).amount == 3


def test_decode_accepts_null_for_any_field() -> None:
    # None is not checked: Optional fields and defaults of None are common.
    assert decode_args(CoreCodecArgs, {"order_id": 1, "email": "e", "note": None}).note is None


@pytest.mark.parametrize("raw", [[1, 2], "text", 3, None])
def test_decode_rejects_a_non_object(raw: Any) -> None:
    with pytest.raises(InvalidJobArgs, match="expected a JSON object"):
        decode_args(CoreCodecArgs, raw)


def test_decode_names_a_missing_field() -> None:
    with pytest.raises(InvalidJobArgs, match=r"args do not fit CoreCodecArgs: .*'email'"):
        decode_args(CoreCodecArgs, {"order_id": 1})


def test_decode_names_an_extra_field() -> None:
    with pytest.raises(InvalidJobArgs, match=r"args do not fit CoreCodecArgs: .*'surprise'"):
        decode_args(CoreCodecArgs, {"order_id": 1, "email": "e", "surprise": 1})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("order_id", "7"),
        ("order_id", 1.5),
        ("order_id", True),  # bool is an int subclass in Python, not in JSON
        ("email", 5),
        ("amount", "1.0"),
        ("urgent", 1),
        ("lines", {"a": 1}),
        ("extra", [1]),
    ],
)
def test_decode_rejects_a_wrong_simple_type(name: str, value: Any) -> None:
    raw = {"order_id": 1, "email": "e", name: value}
    with pytest.raises(InvalidJobArgs, match=rf"field '{name}' expects"):
        decode_args(CoreCodecArgs, raw)


def test_decode_with_unresolvable_annotations_falls_back_to_the_constructor() -> None:
    # A forward reference that names nothing: get_type_hints() fails, decoding still works.
    @dataclass
    class CoreCodecForward:
        value: NoSuchType  # type: ignore[name-defined]  # noqa: F821

    assert decode_args(CoreCodecForward, {"value": 1}).value == 1
    with pytest.raises(InvalidJobArgs):
        decode_args(CoreCodecForward, {})


def test_decode_turns_post_init_validation_into_invalid_job_args() -> None:
    @dataclass
    class CoreCodecValidated:
        count: int

        def __post_init__(self) -> None:
            if self.count < 0:
                raise ValueError("count must be >= 0")

    with pytest.raises(InvalidJobArgs, match="count must be >= 0"):
        decode_args(CoreCodecValidated, {"count": -1})


def test_decode_error_message_is_bounded() -> None:
    huge = ["x" * 1000] * 100
    with pytest.raises(InvalidJobArgs) as caught:
        decode_args(CoreCodecArgs, huge)
    assert len(str(caught.value)) < 400


def test_fields_outside_init_round_trip() -> None:
    # asdict() stores every field, __init__ takes only init fields: derived fields are
    # recomputed on decode, not rejected as unexpected.
    @dataclass
    class CoreCodecDerived:
        price: int
        doubled: int = field(init=False)

        def __post_init__(self) -> None:
            self.doubled = self.price * 2

    stored = encode_args(CoreCodecDerived(price=3))
    assert stored == {"price": 3, "doubled": 6}
    assert decode_args(CoreCodecDerived, stored) == CoreCodecDerived(price=3)
    with pytest.raises(InvalidJobArgs, match="unexpected"):
        decode_args(CoreCodecDerived, {"price": 3, "nope": 1})


# -- text PostgreSQL's jsonb refuses ----------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ["\ud800", "a\udbffb", "\udc00", "\udfff\ud800", "\\\ud800", "ok \U0001f600 \ud83d"],
)
def test_dumps_rejects_lone_surrogates_anywhere(text: str) -> None:
    with pytest.raises(SerializationError, match="lone surrogate"):
        dumps({"x": text}, what="args")
    with pytest.raises(SerializationError, match="lone surrogate"):
        dumps({text: 1}, what="args")


@pytest.mark.parametrize("text", ["\U0001f600", "\\ud800", "\\\\ud800", "\\udc00\\ud800", "é"])
def test_dumps_accepts_surrogate_pairs_and_lookalike_text(text: str) -> None:
    assert json.loads(dumps({"x": text}, what="args"))["x"] == text


def deep(levels: int) -> Any:
    """Containers `levels` deep, lists and dicts in turn."""
    value: Any = 0
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize("levels", [101, 150, 5_000, 50_000])
def test_dumps_rejects_nesting_deeper_than_100_levels(levels: int) -> None:
    with pytest.raises(SerializationError, match="more than 100 levels deep"):
        dumps(deep(levels), what="args")


def test_dumps_accepts_100_levels_and_brackets_inside_strings() -> None:
    assert json.loads(dumps(deep(100), what="args")) == deep(100)
    assert dumps({"x": "[{" * 1000, "y": [[1]] * 500}, what="args")


def test_encode_args_rejects_deep_dataclass_args() -> None:
    with pytest.raises(SerializationError, match="levels deep"):
        encode_args_json(CoreCodecArgs(order_id=1, email="e", extra={"v": deep(20_000)}), what="a")
