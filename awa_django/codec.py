"""Args codec: a dataclass instance ⇄ the JSON stored in `args`, with clear errors."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from typing import Any

from awa_django.exceptions import InvalidJobArgs, PayloadTooLarge, SerializationError

# A NUL character in a JSON string is the escape \u0000 preceded by an even number of
# backslashes; after an odd number it is the literal text "\u0000", which jsonb accepts.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# json.dumps escapes every non-ASCII character, so a surrogate appears as \udXXX. A high
# one followed by a low one is a pair (one astral character, stored fine); any other is
# lone, and neither UTF-8 nor jsonb can hold it. Pairs are matched first so their halves
# are never reported alone; group 1 is a lone one.
_SURROGATE_ESCAPE = re.compile(
    r"(?<!\\)(?:\\\\)*\\u(?:d[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|(d[89a-f][0-9a-f]{2}))"
)
# In a Python str any surrogate code point is lone: a decoded pair is one character.
_SURROGATE = re.compile(r"[\ud800-\udfff]")

# One bound for every stored error text (handler exceptions, Cancel reasons, fail_external,
# rescue messages, admin forms): an entry is written on the hot row once per attempt.
MAX_ERROR_BYTES = 8192
_TRUNCATED = "\n... (truncated, full text in logs)"

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
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"{what} cannot be serialised to JSON: {exc}") from exc
    return _checked(text, what, limit)


def _checked(text: str, what: str, limit: int | None) -> str:
    # The substring tests keep the hot path (enqueue_many) to one scan of the text each;
    # the regexes run only when an escape of the kind is present at all.
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise SerializationError(f"{what} contains a NUL character, which PostgreSQL rejects")
    if "\\ud" in text:
        _reject_lone_surrogates(text, what)
    if limit is not None and len(text) > limit:
        raise PayloadTooLarge(f"{what} is {len(text)} bytes of JSON; the limit is {limit}")
    return text


def _reject_lone_surrogates(text: str, what: str) -> None:
    """json.dumps escapes every surrogate as \\udXXX: a pair is one character (an emoji),
    a lone one is text that UTF-8, and so PostgreSQL, cannot hold."""
    if any(m.group(1) for m in _SURROGATE_ESCAPE.finditer(text)):
        raise SerializationError(
            f"{what} contains a lone surrogate (half of a UTF-16 pair), which PostgreSQL "
            "cannot store; decode the text it came from with errors='replace'"
        )


def encode_args_json(args: Any, *, what: str, limit: int | None = None) -> str:
    """`dumps(encode_args(args))` without building the intermediate dict tree: json calls
    `_plain` for each dataclass it meets, nested ones included."""
    if isinstance(args, dict) or (dataclasses.is_dataclass(args) and not isinstance(args, type)):
        try:
            text = json.dumps(args, separators=(",", ":"), allow_nan=False, default=_plain)
        except (TypeError, ValueError, RecursionError) as exc:
            raise SerializationError(f"{what} cannot be serialised to JSON: {exc}") from exc
        return _checked(text, what, limit)
    return dumps(encode_args(args), what=what, limit=limit)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encode_args(args: Any) -> dict[str, Any]:
    """A dataclass instance (or a plain dict) as a JSON-ready dict."""
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        return dataclasses.asdict(args)
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
    for field_name, hint in _field_hints(args_type):
        if field_name in raw:
            _check_type(name, field_name, hint, raw[field_name])
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
def _field_hints(args_type: type) -> tuple[tuple[str, Any], ...]:
    """(field, annotation) pairs of a dataclass, resolved once per class."""
    try:
        hints = typing.get_type_hints(args_type)
    except Exception:  # unresolvable annotations: fall back to the constructor's checks
        hints = {}
    return tuple((f.name, hints.get(f.name)) for f in dataclasses.fields(args_type))


@functools.cache
def _derived_fields(args_type: type) -> frozenset[str]:
    """Fields declared with init=False."""
    return frozenset(f.name for f in dataclasses.fields(args_type) if not f.init)


def _check_type(owner: str, field: str, hint: Any, value: Any) -> None:
    """Reject values whose JSON type plainly contradicts a simple annotation."""
    allowed = _SIMPLE_TYPES.get(typing.get_origin(hint) or hint)
    if allowed is None or value is None:
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


def storable_text(text: str, limit: int = MAX_ERROR_BYTES) -> str:
    """`text` as PostgreSQL can store it: NUL shown as `\\x00` (text cannot hold it), lone
    surrogates escaped (UTF-8 cannot encode them), and at most `limit` UTF-8 bytes, the
    cut marked. For texts we record (errors, reasons), never for values a caller chose."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    encoded = text.encode("utf-8", "backslashreplace")
    if len(encoded) <= limit:
        return encoded.decode("utf-8")
    marker = _TRUNCATED.encode()
    head = encoded[: limit - len(marker)].decode("utf-8", "ignore")  # no half characters
    return head + _TRUNCATED
