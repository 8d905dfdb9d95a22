"""Settings: the `AWA` dict in Django settings, its defaults and validation.

    AWA = {
        "QUEUES": {"default": {"concurrency": 10}, "email": {"concurrency": 4, "deadline": 60}},
        "HEARTBEAT_INTERVAL": 30,
        "CALLBACK_SECRET": env("AWA_CALLBACK_SECRET"),
    }

`CALLBACK_SECRETS` (a list) replaces `CALLBACK_SECRET` to rotate the key: requests are
signed with the first and accepted with any (docs/callbacks.md).

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

from awa_django import keys, limits
from awa_django.limits import DEFAULT_RATE_SCOPE, RATE_SCOPES, RateLimit

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
# Priority aging never lifts a job above Awa's urgent level: a job stored at 1 or lower
# (more urgent) never ages (docs/decisions/018-priority-aging-and-bulk-operations.md).
AGING_TOP_PRIORITY = 1
HOOK_OVERFLOW_POLICIES = ("drop", "pause")


# More slots than any process can run: a claim's LIMIT and the slot arithmetic stay far
# inside PostgreSQL's integers whatever a command line says.
MAX_CONCURRENCY = 10_000


@dataclass(frozen=True, slots=True)
class QueueConfig:
    name: str
    concurrency: int = 10
    # Hard wall-clock limit per attempt; 0 disables the deadline.
    deadline: float = 300.0
    # The default of `@job(atomic=...)` for `def` handlers of this queue: the handler runs
    # in a transaction that commits with its guarded completion (docs/exactly-once.md).
    atomic: bool = False
    # Jobs of this queue that fail for good move to the dead letters (docs/dead-letters.md).
    dead_letter: bool = False
    # Flow control (docs/flow-control.md, decision 017): a token bucket before each claim,
    # shared by every worker process ("global", one row per queue) or per process ("local").
    rate_limit: RateLimit | None = None
    rate_scope: str = DEFAULT_RATE_SCOPE
    # Only with AWA["WORKER"]["max_workers"]: slots always reserved for this queue in a
    # worker, and its weight in sharing the rest among queues that have work.
    min_workers: int = 0
    weight: float = 1.0
    # Seconds an available job waits per priority level it gains (up to
    # AGING_TOP_PRIORITY); None or 0 turns aging off (docs/worker.md, decision 018).
    priority_aging: float | None = None
    # Per-key limits of this queue's jobs that have a concurrency key but whose `@job`
    # declares no max_in_flight / key_rate_limit (docs/flow-control.md, decision 045).
    max_in_flight: int = 1
    key_rate_limit: RateLimit | None = None

    def key_limits(self, max_in_flight: int | None, rate_limit: RateLimit | None) -> keys.KeyLimits:
        """A keyed job's limits: those its `@job` declares, else this queue's defaults."""
        return keys.KeyLimits(
            self.max_in_flight if max_in_flight is None else max_in_flight,
            self.key_rate_limit if rate_limit is None else rate_limit,
        )


# How many job kinds a worker's metrics name in their `kind` label (docs/operations.md).
DEFAULT_METRICS_MAX_KINDS = 100


@dataclass(frozen=True, slots=True)
class AwaSettings:
    queues: dict[str, QueueConfig] = field(
        default_factory=lambda: {DEFAULT_QUEUE: QueueConfig(DEFAULT_QUEUE)}
    )
    database: str = "default"
    poll_interval: float = 0.2
    # How often a process that does not hold a queue's waker role polls it while its LISTEN
    # connection is up (the holder polls every POLL_INTERVAL and hears every NOTIFY). The
    # longest a job waits when the holder is busy or hung. Decision 025.
    standby_poll_interval: float = 1.0
    heartbeat_interval: float = 30.0
    heartbeat_staleness: float = 90.0
    rescue_interval: float = 30.0
    promote_interval: float = 0.25
    prune_interval: float = 60.0
    # The leader evaluates cron schedules every CRON_INTERVAL and upserts the declared ones
    # every CRON_SYNC_INTERVAL (and as soon as it leads). Decision 013.
    cron_interval: float = 1.0
    cron_sync_interval: float = 60.0
    # A fire older than CRON_INTERVAL + CRON_GRACE when the leader first sees it owed was
    # *missed* (no leader, or a stalled one) and its schedule's missed-fire policy applies;
    # any younger fire is enqueued whatever the policy. More than a leader failover takes
    # with the default LEADER_TTL and ELECTION_INTERVAL. Decision 034, docs/cron.md.
    cron_grace: float = 60.0
    leader_ttl: float = 30.0
    election_interval: float = 10.0
    shutdown_grace: float = 30.0
    completed_retention: float = 24 * 3600.0
    failed_retention: float = 72 * 3600.0
    # Dead letters are kept this long, then pruned by the leader (docs/dead-letters.md).
    dead_letter_retention: float = 30 * 86400.0
    max_args_bytes: int = 256 * 1024
    max_result_bytes: int = 256 * 1024
    sync_threads: int | None = None
    # Newest first: the first signs, any verifies. CALLBACK_SECRET is a one-element list.
    callback_secrets: tuple[str, ...] = ()
    callback_allow_unsigned: bool = False
    callback_replay_window: float = 300.0
    callback_max_body_bytes: int = 1024 * 1024
    throughput_log_interval: float = 60.0
    # Lifecycle events waiting for their hooks in one worker; past it HOOK_OVERFLOW applies:
    # "drop" (count and log; hooks never slow the queue) or "pause" (stop claiming until the
    # backlog drains: no event lost, the queue slows to the hooks' pace). Decision 010.
    hook_backlog: int = 10_000
    hook_overflow: str = "drop"
    # A job waits this long before a worker without its handler claims it and fails it, so
    # a rolling deploy never fails new work (decisions 011 and 032); an import path a
    # worker cannot resolve is handed back for as long.
    unknown_kind_grace: float = 3600.0
    # AWA["WORKER"]["max_workers"]: one process's slots shared by weight among its queues
    # (None: each queue has its own fixed `concurrency`, as before). Decision 017.
    max_workers: int | None = None
    # How often each worker re-reads the runtime overrides (Client.set_queue_limits).
    override_refresh_interval: float = 2.0
    # The leader's per-minute queue rollups (the dashboard's charts) are kept this long.
    # Decision 021.
    rollup_retention: float = 24 * 3600.0
    # A worker's metrics name at most this many kinds in their `kind` label, and only kinds
    # it has a handler for; every other kind counts as kind="other" (bounded cardinality).
    metrics_max_kinds: int = DEFAULT_METRICS_MAX_KINDS
    # Where the worker LISTENs: None = its DATABASE connection (unless that alias is behind a
    # transaction pooler), an alias or a libpq DSN reaching PostgreSQL directly, or False =
    # never (poll only). READ_DATABASE: the alias the admin and awa_status read from (a
    # replica); None = DATABASE. Decision 020, docs/deployment.md.
    listen_database: str | bool | None = None
    read_database: str | None = None

    @property
    def callback_secret(self) -> str | None:
        """The secret that signs requests (the first of `callback_secrets`), or None."""
        return self.callback_secrets[0] if self.callback_secrets else None

    def queue(self, name: str) -> QueueConfig:
        return self.queues.get(name) or QueueConfig(name)

    @property
    def dead_letter_queues(self) -> tuple[str, ...]:
        """The queues whose failed jobs move to the dead letters (`"dead_letter": True`)."""
        return tuple(sorted(name for name, queue in self.queues.items() if queue.dead_letter))

    def with_overrides(self, **overrides: Any) -> AwaSettings:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


# Keys parsed by their own functions rather than as scalars.
_SECRET_KEYS = ("CALLBACK_SECRET", "CALLBACK_SECRETS")
_SCALAR_KEYS = {
    f.name.upper(): f.name
    for f in fields(AwaSettings)
    if f.name not in ("queues", "callback_secrets", "max_workers", "listen_database")
}
_KNOWN_KEYS = {"QUEUES", "WORKER", "LISTEN_DATABASE", *_SECRET_KEYS, *_SCALAR_KEYS}
_QUEUE_KEYS = tuple(f.name for f in fields(QueueConfig) if f.name != "name")


def validate_queue_name(name: object) -> str:
    from awa_django.exceptions import InvalidQueueName

    if not isinstance(name, str) or not QUEUE_NAME_RE.fullmatch(name):
        raise InvalidQueueName(
            f"invalid queue name {name!r}: use 1-200 characters of letters, digits, "
            "'_', '-', '.' and ':'"
        )
    return name


def _parse_queues(raw: Any, max_workers: int | None = None) -> dict[str, QueueConfig]:
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
        queues[name] = _parse_queue(name, dict(options or {}), max_workers)
    if max_workers is not None:
        check_weighted(list(queues.values()), max_workers)
    return queues


def _parse_queue(name: str, options: dict[str, Any], max_workers: int | None) -> QueueConfig:
    where = f'AWA["QUEUES"][{name!r}]'
    unknown = set(options) - set(_QUEUE_KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed keys are "
            f"{', '.join(_QUEUE_KEYS)}."
        )
    if max_workers is None and {"min_workers", "weight"} & set(options):
        raise ImproperlyConfigured(
            f'{where}: min_workers and weight share AWA["WORKER"]["max_workers"] slots; set '
            'AWA["WORKER"] = {"max_workers": N} or remove them.'
        )
    if max_workers is not None:
        # Weighted: `concurrency` is this queue's cap within the shared slots (decision 017).
        options.setdefault("concurrency", max_workers)
    try:
        if options.get("rate_limit") is not None:
            options["rate_limit"] = limits.rate_limit(options["rate_limit"])
        if options.get("key_rate_limit") is not None:
            options["key_rate_limit"] = limits.rate_limit(options["key_rate_limit"])
        if "max_in_flight" in options:
            options["max_in_flight"] = keys.check_max_in_flight(options["max_in_flight"])
    except ValueError as exc:
        raise ImproperlyConfigured(f"{where}: {exc}.") from exc
    queue = QueueConfig(name=name, **options)
    if not (_is_int(queue.concurrency) and 1 <= queue.concurrency <= MAX_CONCURRENCY) or not (
        _is_number(queue.deadline) and queue.deadline >= 0
    ):
        raise ImproperlyConfigured(
            f"{where}: concurrency must be 1 to {MAX_CONCURRENCY} and deadline >= 0."
        )
    if queue.rate_scope not in RATE_SCOPES:
        raise ImproperlyConfigured(
            f"{where}: rate_scope must be one of {', '.join(RATE_SCOPES)}, "
            f"got {queue.rate_scope!r:.50}."
        )
    if not (_is_int(queue.min_workers) and 0 <= queue.min_workers <= queue.concurrency):
        raise ImproperlyConfigured(f"{where}: min_workers must be a whole number 0..concurrency.")
    if not (_is_number(queue.weight) and queue.weight >= 0):
        raise ImproperlyConfigured(f"{where}: weight must be a number >= 0.")
    _check_priority_aging(name, queue.priority_aging)
    for flag in ("atomic", "dead_letter"):
        if not isinstance(value := getattr(queue, flag), bool):
            raise ImproperlyConfigured(
                f'{where}["{flag}"] must be True or False, got {value!r:.100}.'
            )
    return queue


def check_weighted(queues: list[QueueConfig], max_workers: int) -> None:
    """The minimums must fit in max_workers, and a queue without a minimum needs some
    shared slots to ever run; ImproperlyConfigured says which numbers to change."""
    reserved = sum(q.min_workers for q in queues)
    if reserved > max_workers:
        raise ImproperlyConfigured(
            f'The queues\' min_workers add up to {reserved}, more than AWA["WORKER"]'
            f'["max_workers"] = {max_workers}: raise max_workers or lower the minimums.'
        )
    stranded = [q.name for q in queues if q.min_workers == 0 and reserved == max_workers]
    if stranded:
        raise ImproperlyConfigured(
            f"The min_workers take every one of the {max_workers} slots, so queue(s) "
            f"{', '.join(stranded)} (min_workers 0) could never run: raise max_workers."
        )


def _parse_worker(raw: Any) -> int | None:
    """AWA["WORKER"] = {"max_workers": N}: the slots one worker process shares."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"max_workers"}:
        raise ImproperlyConfigured(
            'AWA["WORKER"] must be a dict with one key, such as {"max_workers": 64}.'
        )
    value = raw.get("max_workers")
    if value is not None and not (_is_int(value) and value >= 1):
        raise ImproperlyConfigured(
            f'AWA["WORKER"]["max_workers"] must be a whole number >= 1, got {value!r:.50}.'
        )
    return value


def _check_priority_aging(queue: str, seconds: object) -> None:
    if seconds is not None and not (_is_number(seconds) and seconds >= 0):  # type: ignore[operator]
        raise ImproperlyConfigured(
            f'AWA["QUEUES"][{queue!r}]["priority_aging"] must be a number of seconds >= 0 '
            f"(0 or None turns aging off), got {seconds!r:.100}."
        )


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


def _parse_callback_secrets(raw: dict[str, Any]) -> tuple[str, ...]:
    """CALLBACK_SECRETS (a list, newest first) or CALLBACK_SECRET (one string), not both.
    An empty CALLBACK_SECRET means none, as an unset environment variable gives."""
    single, many = raw.get("CALLBACK_SECRET"), raw.get("CALLBACK_SECRETS")
    if single is not None and not isinstance(single, str):
        raise ImproperlyConfigured(
            f'AWA["CALLBACK_SECRET"] must be a string (or None), got {single!r:.20}.'
        )
    if many is None:
        return (single,) if single else ()
    if single:
        raise ImproperlyConfigured(
            'Set AWA["CALLBACK_SECRETS"] or AWA["CALLBACK_SECRET"], not both: the list '
            "replaces the single secret (put the current secret first)."
        )
    # A bare string is refused rather than read as a list of one-character secrets.
    # The message names types only: the values may be secrets.
    if not isinstance(many, list | tuple):
        raise ImproperlyConfigured(
            'AWA["CALLBACK_SECRETS"] must be a list of strings, newest first, '
            f"got a {type(many).__name__}."
        )
    for position, secret in enumerate(many):
        if not isinstance(secret, str):
            raise ImproperlyConfigured(
                f'AWA["CALLBACK_SECRETS"][{position}] must be a string, '
                f"got a {type(secret).__name__}."
            )
    # An empty entry is an unset environment variable (`os.environ.get(NAME, "")`): it
    # verifies nothing, and a list of only those is no secret (awa.E010 / awa.W013 say so).
    return tuple(s for s in many if s)


def _parse_listen_database(value: object) -> str | bool | None:
    """None, False, an alias or a DSN (which alias it is is checked by awa.E031)."""
    if value is None or value is False:
        return None if value is None else False
    if isinstance(value, str) and value.strip():
        return value
    raise ImproperlyConfigured(
        'AWA["LISTEN_DATABASE"] must be a database alias, a libpq DSN such as '
        '"postgres://user@db-primary:5432/app", False (never LISTEN: poll only) or None '
        f"(LISTEN on AWA['DATABASE']), got {value!r:.100}."
    )


def load_settings() -> AwaSettings:
    """Read `settings.AWA` into an `AwaSettings`; raises ImproperlyConfigured on mistakes."""
    raw: dict[str, Any] = dict(getattr(django_settings, "AWA", {}) or {})
    unknown = set(raw) - _KNOWN_KEYS
    if unknown:
        raise ImproperlyConfigured(
            f"Unknown AWA setting(s): {', '.join(sorted(unknown))}. "
            f"Known: {', '.join(sorted(_KNOWN_KEYS))}."
        )
    kwargs: dict[str, Any] = {_SCALAR_KEYS[k]: v for k, v in raw.items() if k in _SCALAR_KEYS}
    for name, value in kwargs.items():
        _check_scalar(name, value)
    if kwargs.get("hook_overflow", "drop") not in HOOK_OVERFLOW_POLICIES:
        raise ImproperlyConfigured(
            f'AWA["HOOK_OVERFLOW"] must be one of {", ".join(HOOK_OVERFLOW_POLICIES)}, '
            f"got {kwargs['hook_overflow']!r:.100}."
        )
    kwargs["callback_secrets"] = _parse_callback_secrets(raw)
    kwargs["max_workers"] = _parse_worker(raw.get("WORKER"))
    kwargs["listen_database"] = _parse_listen_database(raw.get("LISTEN_DATABASE"))
    if "QUEUES" in raw:
        kwargs["queues"] = _parse_queues(raw["QUEUES"], kwargs["max_workers"])
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
