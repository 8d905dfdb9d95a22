"""Unique jobs: the options (`UniqueOpts`) and Awa's key over them, computed without I/O.

The key is Awa's byte for byte (awa-model `unique.rs`, reference §8.1), so another Awa
client computes the same key for the same job: the first 16 bytes of BLAKE3 over
`kind`, then `0x00 ‖ queue` (by_queue), `0x00 ‖ canonical JSON of args` (by_args) and
`0x00 ‖ period bucket as 8-byte little-endian i64` (by_period). The states in which a job
holds its key are stored as Awa's `bit(8)` text: bit 0 (leftmost) = scheduled ...
bit 7 = waiting_external.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from blake3 import blake3

from awa_django.exceptions import InvalidEnqueueOption
from awa_django.states import JobState

# Awa's bit positions (awa-model job.rs): the index of each state in the bit(8) text.
STATE_BITS: dict[str, int] = {
    JobState.SCHEDULED: 0,
    JobState.AVAILABLE: 1,
    JobState.RUNNING: 2,
    JobState.COMPLETED: 3,
    JobState.RETRYABLE: 4,
    JobState.FAILED: 5,
    JobState.CANCELLED: 6,
    JobState.WAITING_EXTERNAL: 7,
}
# Awa's default mask 0b0001_1111: a job holds its key until it fails or is cancelled, and
# while it waits for a callback the key is free (as in Awa).
DEFAULT_UNIQUE_STATES: frozenset[str] = frozenset(
    {
        JobState.SCHEDULED,
        JobState.AVAILABLE,
        JobState.RUNNING,
        JobState.COMPLETED,
        JobState.RETRYABLE,
    }
)
KEY_BYTES = 16
_SEPARATOR = b"\x00"
_I64 = range(-(2**63), 2**63)
_U64_END = 2**64


@dataclass(frozen=True, slots=True)
class UniqueOpts:
    """What makes two jobs of one kind duplicates, and while which states a job keeps
    others out.

        enqueue(SendReceipt(order_id=7), unique=UniqueOpts())            # same kind + args
        enqueue(Digest(), unique=UniqueOpts(by_args=False, by_period=3600))  # once an hour

    by_args: the args are part of the key (default). by_queue: the queue is too.
    by_period: seconds; jobs whose `run_at` (now when None) falls in the same
    `epoch_seconds // by_period` bucket are duplicates. states: the states in which a job
    holds its key (default scheduled, available, running, completed, retryable: a failed
    or cancelled job, or one waiting for a callback, lets a new one in).
    """

    by_args: bool = True
    by_queue: bool = False
    by_period: int | None = None
    states: Collection[str] = field(default=DEFAULT_UNIQUE_STATES)

    def __post_init__(self) -> None:
        for name in ("by_args", "by_queue"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidEnqueueOption(f"UniqueOpts.{name} must be True or False")
        _check_period(self.by_period)
        object.__setattr__(self, "states", _check_states(self.states))

    @property
    def states_mask(self) -> str:
        """The states as Awa's bit(8) text, e.g. '11111000' for the default."""
        return "".join("1" if s in self.states else "0" for s in STATE_BITS)

    def period_bucket(self, run_at: dt.datetime | None) -> int | None:
        """The bucket of `run_at` (now when None), or None without by_period."""
        if self.by_period is None:
            return None
        seconds = time.time() if run_at is None else run_at.timestamp()
        return math.floor(seconds) // self.by_period


def _check_period(by_period: object) -> None:
    if by_period is None:
        return
    if isinstance(by_period, bool) or not isinstance(by_period, int) or by_period <= 0:
        raise InvalidEnqueueOption(
            f"UniqueOpts.by_period must be a positive number of seconds, got {by_period!r:.60}"
        )


def _check_states(states: object) -> frozenset[str]:
    if isinstance(states, str) or not isinstance(states, Iterable):
        raise InvalidEnqueueOption(
            "UniqueOpts.states must be a collection of states such as "
            f"{{'available', 'running'}}, got {states!r:.60}"
        )
    chosen: frozenset[object] = frozenset(states)
    unknown = sorted(str(s) for s in chosen if s not in STATE_BITS)
    if unknown:
        raise InvalidEnqueueOption(
            f"UniqueOpts.states has unknown states {unknown}; choose from {list(STATE_BITS)}"
        )
    if not chosen:
        raise InvalidEnqueueOption("UniqueOpts.states must name at least one state")
    return frozenset(JobState(str(s)).value for s in chosen)


def unique_key(
    kind: str, *, queue: str | None = None, args: Any = None, period_bucket: int | None = None
) -> bytes:
    """Awa's key: `queue`, `args` (plain JSON values: dicts, lists, str, int, float, bool,
    None) and `period_bucket` are hashed only when given (not None)."""
    hasher = blake3(kind.encode())
    if queue is not None:
        hasher.update(_SEPARATOR + queue.encode())
    if args is not None:
        hasher.update(_SEPARATOR + canonical_json(args).encode())
    if period_bucket is not None:
        hasher.update(_SEPARATOR + period_bucket.to_bytes(8, "little", signed=True))
    return hasher.digest(length=KEY_BYTES)


def key_for(
    options: UniqueOpts, *, kind: str, queue: str, args_json: str, run_at: dt.datetime | None
) -> bytes:
    """The key of one job planned for enqueue: `args_json` is its stored args text."""
    return unique_key(
        kind,
        queue=queue if options.by_queue else None,
        args=json.loads(args_json) if options.by_args else None,
        period_bucket=options.period_bucket(run_at),
    )


def canonical_json(value: Any) -> str:
    """JSON as serde_json writes a `serde_json::Value` (what Awa hashes): keys sorted,
    no whitespace, non-ASCII unescaped, floats in Rust's shortest form (`1e-7`, not
    Python's `1e-07`), integers beyond 64 bits as floats (serde_json holds them as f64)."""
    if isinstance(value, dict):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{_string(k)}:{canonical_json(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value) if value in _I64 or 0 <= value < _U64_END else rust_float(float(value))
    if isinstance(value, float):
        return rust_float(value)
    raise InvalidEnqueueOption(f"cannot build a unique key over a {type(value).__name__}")


def _string(text: str) -> str:
    # Python's escapes with ensure_ascii=False are serde_json's: \" \\ \b \f \n \r \t and
    # \u00xx (lower-case hex) for the other control characters, nothing else escaped.
    return json.dumps(text, ensure_ascii=False)


def rust_float(value: float) -> str:
    """A finite float as Rust's `ryu` (serde_json's float writer) prints it. Both print the
    shortest digits that round-trip; only the layout differs: ryu writes plain decimals
    for 1e-5 <= |v| < 1e16 and otherwise `de±x` / `d.ddde±x` without '+' or padding."""
    if not math.isfinite(value):
        raise InvalidEnqueueOption("a unique key cannot cover NaN or infinity")
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    k = int(exponent or 0) - len(fraction) + len(digits) - len(digits.rstrip("0"))
    digits = digits.rstrip("0")
    return sign + _ryu_layout(digits, k)


def _ryu_layout(digits: str, k: int) -> str:
    """ryu's `format64` layout of the value `digits` * 10**k (digits without end zeros)."""
    length = len(digits)
    kk = length + k  # 10^(kk-1) <= value < 10^kk
    if k >= 0 and kk <= 16:
        return digits + "0" * k + ".0"
    if 0 < kk <= 16:
        return digits[:kk] + "." + digits[kk:]
    if -5 < kk <= 0:
        return "0." + "0" * -kk + digits
    if length == 1:
        return f"{digits}e{kk - 1}"
    return f"{digits[0]}.{digits[1:]}e{kk - 1}"


OnConflict = Literal["raise", "skip"]


@dataclass(frozen=True, slots=True)
class EnqueueManyResult:
    """What `enqueue_many(..., on_conflict="skip")` did: per input position, the new job's
    id, or None where the row was skipped because a live job (or an earlier row of the same
    call) held its unique key."""

    job_ids: tuple[int | None, ...]

    @property
    def ids(self) -> list[int]:
        """The ids of the jobs written, in input order."""
        return [i for i in self.job_ids if i is not None]

    @property
    def skipped(self) -> list[int]:
        """The input positions (0-based) that were not written."""
        return [n for n, i in enumerate(self.job_ids) if i is None]
