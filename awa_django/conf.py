"""Settings: the `AWA` dict in Django settings, its defaults and validation.

    AWA = {
        "QUEUES": {"default": {"concurrency": 10}, "email": {"concurrency": 4, "deadline": 60}},
        "HEARTBEAT_INTERVAL": 30,
        "CALLBACK_SECRET": env("AWA_CALLBACK_SECRET"),
    }

Every duration is in seconds (floats allowed, so tests can use fractions of a second).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

# \Z, not $: `$` also matches before a trailing newline ("default\n" would pass).
QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}\Z")

# A job's defaults, defined here once: enqueue, `@job`, the model and the admin use them.
DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 2  # lower runs first; Awa's scale is 1 (urgent) .. 4 (batch)
DEFAULT_MAX_ATTEMPTS = 25
# The ranges the model's check constraints enforce. Priority -98..102 admits the whole
# django.tasks range mapped as 2 - p (docs/decisions/001-priority-mapping.md).
MIN_PRIORITY, MAX_PRIORITY = -98, 102
MIN_MAX_ATTEMPTS, MAX_MAX_ATTEMPTS = 1, 1000


@dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    concurrency: int = 10
    # Hard wall-clock limit per attempt; 0 disables the deadline.
    deadline: float = 300.0


@dataclass(frozen=True, slots=True)
class AwaSettings:
    queues: dict[str, QueueConfig] = field(
        default_factory=lambda: {DEFAULT_QUEUE: QueueConfig(DEFAULT_QUEUE)}
    )
    database: str = "default"
    poll_interval: float = 0.2
    heartbeat_interval: float = 30.0
    heartbeat_staleness: float = 90.0
    rescue_interval: float = 30.0
    promote_interval: float = 0.25
    prune_interval: float = 60.0
    leader_ttl: float = 30.0
    election_interval: float = 10.0
    shutdown_grace: float = 30.0
    completed_retention: float = 24 * 3600.0
    failed_retention: float = 72 * 3600.0
    max_args_bytes: int = 256 * 1024
    max_result_bytes: int = 256 * 1024
    sync_threads: int | None = None
    callback_secret: str | None = None
    callback_allow_unsigned: bool = False
    callback_replay_window: float = 300.0
    callback_max_body_bytes: int = 1024 * 1024
    throughput_log_interval: float = 60.0

    def queue(self, name: str) -> QueueConfig:
        return self.queues.get(name) or QueueConfig(name)

    def with_overrides(self, **overrides: Any) -> AwaSettings:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


_SCALAR_KEYS = {f.name.upper(): f.name for f in fields(AwaSettings) if f.name != "queues"}


def validate_queue_name(name: object) -> str:
    from awa_django.exceptions import InvalidQueueName

    if not isinstance(name, str) or not QUEUE_NAME_RE.fullmatch(name):
        raise InvalidQueueName(
            f"invalid queue name {name!r}: use 1-200 characters of letters, digits, "
            "'_', '-', '.' and ':'"
        )
    return name


def _parse_queues(raw: Any) -> dict[str, QueueConfig]:
    if isinstance(raw, list | tuple):
        raw = {name: {} for name in raw}
    if not isinstance(raw, dict) or not raw:
        raise ImproperlyConfigured(
            'AWA["QUEUES"] must be a non-empty dict such as {"default": {"concurrency": 10}}.'
        )
    queues = {}
    for name, options in raw.items():
        validate_queue_name(name)
        if isinstance(options, int):
            options = {"concurrency": options}
        try:
            queue = QueueConfig(name=name, **(options or {}))
        except TypeError as exc:
            raise ImproperlyConfigured(
                f'AWA["QUEUES"][{name!r}]: {exc}; allowed keys are concurrency and deadline.'
            ) from exc
        if not (_is_int(queue.concurrency) and queue.concurrency >= 1) or not (
            _is_number(queue.deadline) and queue.deadline >= 0
        ):
            raise ImproperlyConfigured(
                f'AWA["QUEUES"][{name!r}]: concurrency must be >= 1 and deadline >= 0.'
            )
        queues[name] = queue
    return queues


_FIELD_TYPES = {f.name: str(f.type) for f in fields(AwaSettings)}
_EXPECTED = {
    "float": "a number of seconds >= 0",
    "int": "a whole number >= 1",
    "bool": "True or False",
    "str": "a string",
}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_scalar(name: str, value: object) -> None:
    """A wrong type here is an ImproperlyConfigured now, not a TypeError in a worker later."""
    annotation = _FIELD_TYPES[name]
    base = annotation.removesuffix(" | None")
    if value is None and base != annotation:
        return
    valid = {
        "float": _is_number(value) and value >= 0,  # type: ignore[operator]
        "int": _is_int(value) and value >= 1,  # type: ignore[operator]
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }[base]
    if not valid:
        optional = " (or None)" if base != annotation else ""
        raise ImproperlyConfigured(
            f'AWA["{name.upper()}"] must be {_EXPECTED[base]}{optional}, got {value!r:.100}.'
        )


def load_settings() -> AwaSettings:
    """Read `settings.AWA` into an `AwaSettings`; raises ImproperlyConfigured on mistakes."""
    raw: dict[str, Any] = dict(getattr(django_settings, "AWA", {}) or {})
    unknown = set(raw) - set(_SCALAR_KEYS) - {"QUEUES"}
    if unknown:
        raise ImproperlyConfigured(
            f"Unknown AWA setting(s): {', '.join(sorted(unknown))}. "
            f"Known: QUEUES, {', '.join(sorted(_SCALAR_KEYS))}."
        )
    kwargs: dict[str, Any] = {_SCALAR_KEYS[k]: v for k, v in raw.items() if k != "QUEUES"}
    for name, value in kwargs.items():
        _check_scalar(name, value)
    if "QUEUES" in raw:
        kwargs["queues"] = _parse_queues(raw["QUEUES"])
    return AwaSettings(**kwargs)


@functools.cache
def awa_settings() -> AwaSettings:
    """The current settings, parsed once (enqueue reads them on every call) and parsed
    again after `override_settings(AWA=...)` changes them."""
    return load_settings()


@receiver(setting_changed)
def _forget_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "AWA":
        awa_settings.cache_clear()
