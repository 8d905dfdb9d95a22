"""Args codec: a dataclass instance ⇄ the JSON stored in `args`, with clear errors."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from collections.abc import Callable
from typing import Any

from awa_django.exceptions import InvalidJobArgs, PayloadTooLarge, SerializationError

# A NUL character in a JSON string is the escape \u0000 preceded by an even number of
# backslashes; after an odd number it is the literal text "\u0000", which jsonb accepts.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# Every escape of a JSON text, one match each, left to right: an escaped backslash is
# consumed whole, so the "ud800" after it is plain text. A surrogate pair (high then low,
# how json escapes a character beyond U+FFFF) is one match; group 1 is a lone surrogate.
_ESCAPE = re.compile(
    r"\\(?:u(?:d[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|(d[89a-f][0-9a-f]{2})|[0-9a-f]{4})|.)"
)
# Containers nested deeper than this are refused: PostgreSQL's jsonb parser and Python's
# json module both recurse, and no real payload needs more.
MAX_JSON_DEPTH = 100
# A JSON string literal, to skip while counting brackets.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# In a Python str any surrogate code point is lone: a decoded pair is one character.
_SURROGATE = re.compile(r"[\ud800-\udfff]")

# One bound for every stored error text (handler exceptions, Cancel reasons, fail_external,
# rescue messages, admin forms): an entry is written on the hot row once per attempt.
MAX_ERROR_BYTES = 8192
TRUNCATED = "\n... (truncated, full text in logs)"
# The cut mark of a text whose whole is not logged anywhere: it promises nothing.
CUT = "\n... (truncated)"

_SIMPLE_TYPES: dict[Any, tuple[type, ...]] = {
    int: (int,),
    float: (int, float),
    str: (str,),
    bool: (bool,),
    list: (list,),
    dict: (dict,),
}


def dumps(value: Any, *, what: str, limit: int | None = None) -> str:
    """Serialise to compact JSON; SerializationError / PayloadTooLarge on bad input."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} cannot be serialised to JSON: {exc}") from exc
    except RecursionError:
        raise _too_deep(what) from None
    return _checked(text, what, limit)


def _checked(text: str, what: str, limit: int | None) -> str:
    """`text` if PostgreSQL's jsonb will take it, else a SerializationError / PayloadTooLarge.
    Each check looks for a cheap sign first: this runs once per job on the enqueue path."""
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise SerializationError(f"{what} contains a NUL character, which PostgreSQL rejects")
    _reject_lone_surrogates(text, what)
    # A text this short cannot hold more than MAX_JSON_DEPTH opening brackets.
    if (
        len(text) > MAX_JSON_DEPTH
        and _brackets(text) > MAX_JSON_DEPTH
        and _depth(text) > MAX_JSON_DEPTH
    ):
        raise _too_deep(what)
    if limit is not None and len(text) > limit:
        raise PayloadTooLarge(f"{what} is {len(text)} bytes of JSON; the limit is {limit}")
    return text


def _reject_lone_surrogates(text: str, what: str) -> None:
    """A lone surrogate (U+D800..U+DFFF unpaired, e.g. from bytes decoded with
    errors='surrogateescape') is not valid Unicode: jsonb refuses its escape, and UTF-8
    cannot encode it raw. json writes one as the escape \\udXXX (ensure_ascii)."""
    if "\\ud" in text and any(m.group(1) for m in _ESCAPE.finditer(text)):
        raise SerializationError(
            f"{what} contains a lone surrogate (unpaired U+D800..U+DFFF), which is not valid "
            "Unicode text: it usually comes from bytes decoded with errors='surrogateescape'"
        )
    if not text.isascii():  # only text serialised with ensure_ascii=False gets here
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise SerializationError(f"{what} contains a lone surrogate") from None


def _brackets(text: str) -> int:
    """Opening brackets in `text`, strings included: a bound on the depth, counted fast."""
    return text.count("[") + text.count("{")


def _depth(text: str) -> int:
    """How deeply containers nest in the JSON `text` (brackets inside strings skipped)."""
    depth = deepest = 0
    for char in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _too_deep(what: str) -> SerializationError:
    return SerializationError(
        f"{what} nests lists or dicts more than {MAX_JSON_DEPTH} levels deep: flatten it, "
        "or store the data elsewhere and pass its id"
    )


def encode_args_json(args: Any, *, what: str, limit: int | None = None) -> str:
    """`dumps(encode_args(args))` without building the intermediate dict tree: json calls
    `_plain` for each dataclass it meets, nested ones included."""
    if is_args_value(args):
        return encode_args_value(args, what=what, limit=limit)
    return dumps(encode_args(args), what=what, limit=limit)  # raises SerializationError


def is_args_value(args: Any) -> bool:
    """Whether `args` is what a job's args can be: a dict or a dataclass instance. Decided by
    its type alone, so enqueue_many asks once per args type."""
    return isinstance(args, dict) or (dataclasses.is_dataclass(args) and not isinstance(args, type))


def encode_args_value(args: Any, *, what: str, limit: int | None = None) -> str:
    """`encode_args_json` of a value `is_args_value` accepted: the per-job path of
    enqueue_many, about 1.5 µs for a small job."""
    try:
        text = _encode_args(args)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} cannot be serialised to JSON: {exc}") from exc
    except RecursionError:
        raise _unencodable(args, what) from None
    return _checked(text, what, limit)


def _unencodable(args: Any, what: str) -> SerializationError:
    """The fast encoder does not track the containers it is in, so a circular reference
    ends as a RecursionError too: the standard encoder tells the two apart."""
    try:
        _ARGS_ENCODER.encode(args)
    except ValueError as exc:  # "Circular reference detected"
        return SerializationError(f"{what} cannot be serialised to JSON: {exc}")
    except RecursionError:
        pass
    return _too_deep(what)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: getattr(value, name) for name in _field_names(type(value))}
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


@functools.cache
def _field_names(args_type: type) -> tuple[str, ...]:
    """A dataclass's field names, looked up once per class (dataclasses.fields() builds a
    tuple each call: a third of enqueue_many's Python time went there)."""
    return tuple(f.name for f in dataclasses.fields(args_type))


# json.dumps(args, separators=..., allow_nan=False, default=_plain), with the encoder built
# once: dumps() builds one per call when given options, which cost as much as encoding a
# small job. The encoder keeps no state between calls (safe to share between threads).
_ARGS_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_plain)


def _fast_args_encoder() -> Callable[[Any], str]:
    """`_ARGS_ENCODER.encode` without building the C encoder on every call (JSONEncoder
    does, which cost three times the encoding of a small job) and without the circular
    reference bookkeeping (`_unencodable` recovers that error). Same output: JSONEncoder
    itself encodes through this C function with these arguments."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return _ARGS_ENCODER.encode
    try:
        chunks = make(
            None, _plain, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False
        )
    except TypeError:  # a future signature: the public path
        return _ARGS_ENCODER.encode
    return lambda value: "".join(chunks(value, 0))


_encode_args = _fast_args_encoder()


def encode_args(args: Any) -> dict[str, Any]:
    """A dataclass instance (or a plain dict) as a JSON-ready dict."""
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        try:
            return dataclasses.asdict(args)
        except RecursionError:
            raise _too_deep("job args") from None
    if isinstance(args, dict):
        return args
    raise SerializationError(
        f"job args must be a dataclass instance (or a dict with an explicit kind), "
        f"got {type(args).__name__}"
    )


def decode_args(args_type: type | None, raw: Any) -> Any:
    """Build the args dataclass from stored JSON; InvalidJobArgs says what does not fit."""
    if args_type is None:
        return raw
    name = args_type.__name__
    if not isinstance(raw, dict):
        raise InvalidJobArgs(f"args do not fit {name}: expected a JSON object, got {raw!r:.200}")
    for field_name, hint, allowed in _field_checks(args_type):
        if field_name in raw:
            _check_type(name, field_name, hint, allowed, raw[field_name])
    if derived := _derived_fields(args_type):
        # asdict() stored them; __init__ does not take them (__post_init__ recomputes them).
        raw = {key: value for key, value in raw.items() if key not in derived}
    try:
        return args_type(**raw)
    except (TypeError, ValueError) as exc:
        # TypeError: missing / unexpected fields; ValueError: the dataclass's own
        # __post_init__ validation. Both are deterministic, so retrying cannot help.
        raise InvalidJobArgs(f"args do not fit {name}: {exc}") from exc


@functools.cache
def _field_checks(args_type: type) -> tuple[tuple[str, Any, tuple[type, ...]], ...]:
    """(field, annotation, the JSON types it allows) of each field of a dataclass whose
    annotation is simple enough to check, resolved once per class (a worker decodes the
    args of every attempt)."""
    try:
        hints = typing.get_type_hints(args_type)
    except Exception:  # unresolvable annotations: fall back to the constructor's checks
        hints = {}
    checks = []
    for f in dataclasses.fields(args_type):
        hint = hints.get(f.name)
        allowed = _SIMPLE_TYPES.get(typing.get_origin(hint) or hint)
        if allowed is not None:
            checks.append((f.name, hint, allowed))
    return tuple(checks)


@functools.cache
def _derived_fields(args_type: type) -> frozenset[str]:
    """Fields declared with init=False."""
    return frozenset(f.name for f in dataclasses.fields(args_type) if not f.init)


def _check_type(owner: str, field: str, hint: Any, allowed: tuple[type, ...], value: Any) -> None:
    """Reject values whose JSON type plainly contradicts a simple annotation."""
    if value is None:
        return
    if isinstance(value, bool) and bool not in allowed:
        allowed = ()
    if not isinstance(value, allowed):
        raise InvalidJobArgs(
            f"args do not fit {owner}: field {field!r} expects {getattr(hint, '__name__', hint)}, "
            f"got {type(value).__name__} {value!r:.100}"
        )


def unstorable_character(text: str) -> str | None:
    """What in `text` PostgreSQL cannot store as text ("a NUL character", "a lone
    surrogate"), or None. For values a caller chose: refuse them rather than change them."""
    if "\x00" in text:
        return "a NUL character"
    if _SURROGATE.search(text):
        return "a lone surrogate"
    return None


def storable_text(text: str, limit: int = MAX_ERROR_BYTES, marker: str = TRUNCATED) -> str:
    """`text` as PostgreSQL can store it: NUL shown as `\\x00` (text cannot hold it), lone
    surrogates escaped (UTF-8 cannot encode them), and at most `limit` UTF-8 bytes, the
    cut marked with `marker`. For texts we record (errors, reasons), never for values a
    caller chose."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    encoded = text.encode("utf-8", "backslashreplace")
    if len(encoded) <= limit:
        return encoded.decode("utf-8")
    head = encoded[: limit - len(marker.encode())].decode("utf-8", "ignore")  # no half chars
    return head + marker
