"""Concurrency keys: the per-key limits a job kind declares (`@job(concurrency_key=...,
max_in_flight=..., key_rate_limit=...)`), their checks, and how a job carries its key.

A leaf. The key reaches the database in the job's metadata (`KEY_METADATA`), where the
insert trigger of migration 0014 turns it into the `concurrency_key` digest; admission and
release are that migration's triggers (docs/flow-control.md, decision 045).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from awa_django.exceptions import InvalidEnqueueOption
from awa_django.limits import RateLimit, rate_limit

# The metadata entry that carries a job's key and limits to the insert trigger. Reserved:
# enqueue refuses metadata that sets it.
KEY_METADATA = "_awa_concurrency"
MAX_KEY_CHARS = 200
MAX_IN_FLIGHT = 1000  # slot numbers are smallint; a thousand slot rows per key at most
DIGEST_BYTES = 16

# What `@job(concurrency_key=...)` takes: a function of the job's args returning its key
# (a str or an int), or None for a job of that kind without a key.
KeyFunction = Callable[[Any], object]


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """How many jobs of one key may be admitted at once, and how fast they may start."""

    max_in_flight: int = 1
    rate_limit: RateLimit | None = None

    def spec(self, key: str) -> dict[str, object]:
        """The metadata entry of a job with `key` under these limits."""
        spec: dict[str, object] = {"key": key, "max": self.max_in_flight}
        if self.rate_limit is not None:
            spec["rate"] = self.rate_limit.rate
            spec["burst"] = self.rate_limit.burst
        return spec


def keyed_metadata(metadata: str, key: str, limits: KeyLimits) -> dict[str, Any]:
    """A job's metadata (JSON text) with its key and limits added, for the insert trigger."""
    keyed: dict[str, Any] = json.loads(metadata)
    keyed[KEY_METADATA] = limits.spec(key)
    return keyed


def check_key(key: object) -> str:
    """A key is a str of 1 to 200 characters PostgreSQL can store, or an int (its text)."""
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
        raise InvalidEnqueueOption(
            f"a concurrency key must be a str of 1 to {MAX_KEY_CHARS} characters or an int "
            f"(such as a tenant id), got {key!r:.100}"
        )
    if "\x00" in key:
        raise InvalidEnqueueOption("a concurrency key cannot contain a NUL character")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEnqueueOption(
            "a concurrency key contains a lone surrogate, which is not valid Unicode text"
        ) from None
    return key


def check_max_in_flight(value: object) -> int:
    """1 to 1000 jobs of one key admitted at once. Raises ValueError."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_IN_FLIGHT:
        return value
    raise ValueError(f"max_in_flight must be a whole number 1..{MAX_IN_FLIGHT}, got {value!r:.50}")


def check_key_rate_limit(value: object) -> RateLimit | None:
    """None, `(rate, burst)` or a bare rate, as a queue's rate_limit. Raises ValueError."""
    return None if value is None else rate_limit(value)


def key_of(function: KeyFunction, args: Any, kind: str) -> str | None:
    """The key `function` gives `args`, checked; None when it gives None (no key)."""
    try:
        key = function(args)
    except Exception as exc:
        raise InvalidEnqueueOption(
            f"the concurrency_key function of {kind} raised {type(exc).__name__}: {exc!s:.200}"
        ) from exc
    return None if key is None else check_key(key)


def key_digest(key: str) -> bytes:
    """The `concurrency_key` column of a job with `key`: the first 16 bytes of its SHA-256,
    as the insert trigger computes it (the database hashes, so every insert path agrees)."""
    return hashlib.sha256(key.encode()).digest()[:DIGEST_BYTES]
