"""Cron schedules declared in code: `periodic(...)` and the definition it registers.

Declared next to the job, usually at module level in an app's `jobs.py` (autodiscovered),
and checked at once: a bad expression, zone or option raises `InvalidSchedule` at import.
The maintenance leader syncs the declarations into `awa_cron_schedules` and fires them
(docs/cron.md, decision 013).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from awa_django.codec import decode_args, dumps, encode_args_json
from awa_django.conf import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    awa_settings,
    validate_queue_name,
)
from awa_django.cron import (
    MissedFirePolicy,
    check_expression,
    check_name,
    check_policy,
    check_timezone,
)
from awa_django.exceptions import AwaError, InvalidSchedule
from awa_django.keys import key_of, keyed_metadata
from awa_django.options import (
    check_kind,
    check_max_attempts,
    check_metadata,
    check_priority,
    check_tags,
)
from awa_django.registry import kind_for, registry

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ScheduleDefinition:
    """One declared schedule, checked. `queue`, `priority` and `max_attempts` left None
    come from the kind's `@job` declaration when the leader syncs it, else from `conf`."""

    name: str
    expression: str
    timezone: str
    kind: str
    args: str  # JSON text
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    tags: tuple[str, ...] = ()
    metadata: str = "{}"  # JSON text
    missed_fire_policy: MissedFirePolicy = MissedFirePolicy.COALESCE

    def job_options(self) -> tuple[str, int, int]:
        """Queue, priority and max_attempts of its jobs, as of now."""
        declared = registry.job(self.kind)
        queue = declared.queue if declared else DEFAULT_QUEUE
        priority = declared.priority if declared else DEFAULT_PRIORITY
        max_attempts = declared.max_attempts if declared else DEFAULT_MAX_ATTEMPTS
        return (
            queue if self.queue is None else self.queue,
            priority if self.priority is None else self.priority,
            max_attempts if self.max_attempts is None else self.max_attempts,
        )

    def job_metadata(self) -> str:
        """The metadata of its jobs, as of now: the declared metadata, with the job's
        concurrency key (decision 045) when its kind's `@job` gives one, so a fire is
        admitted like an enqueue. A key that cannot be computed leaves the job unkeyed."""
        declared = registry.job(self.kind)
        if declared is None or declared.concurrency_key is None:
            return self.metadata
        try:
            args = decode_args(declared.args_type, json.loads(self.args))
            key = key_of(declared.concurrency_key, args, self.kind)
        except (AwaError, TypeError, ValueError):
            return self.metadata
        if key is None:
            return self.metadata
        config = awa_settings().queue(self.job_options()[0])
        limits = config.key_limits(declared.max_in_flight, declared.key_rate_limit)
        return dumps(keyed_metadata(self.metadata, key, limits), what="metadata")


def periodic(
    name: str,
    expression: str,
    args: Any,
    *,
    timezone: str = "UTC",
    kind: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    tags: Sequence[str] = (),
    metadata: dict[str, Any] | None = None,
    missed_fire_policy: str = "coalesce",
) -> ScheduleDefinition:
    """Declare the schedule `name`: enqueue a job of `args` at every fire of `expression`.

    awa_django.periodic("nightly-report", "0 2 * * *", NightlyReport(days=1),
                        timezone="Europe/Berlin", missed_fire_policy="coalesce")

    `expression` has 5 fields, or 6 with seconds first ("*/10 * * * * *"); `timezone` is an
    IANA name. `args` is an args dataclass instance (its kind from the class) or a dict with
    `kind=`. A fire's job carries `cron_name` and `cron_fire_time` in its metadata.
    `missed_fire_policy` after downtime: "coalesce" (the latest missed fire only) or
    "catch_up" (every missed fire, in order). Raises InvalidSchedule for a bad declaration
    (including a second, different declaration under the same name).
    """
    try:
        definition = ScheduleDefinition(
            name=check_name(name),
            expression=check_expression(expression),
            timezone=check_timezone(timezone).key,
            kind=_kind(args, kind),
            args=encode_args_json(
                args, what=f"args of schedule {name!r}", limit=awa_settings().max_args_bytes
            ),
            queue=_optional(validate_queue_name, queue),
            priority=_optional(check_priority, priority),
            max_attempts=_optional(check_max_attempts, max_attempts),
            tags=tuple(check_tags(tags)),
            metadata=_metadata(metadata),
            missed_fire_policy=check_policy(missed_fire_policy),
        )
    except InvalidSchedule:
        raise
    except AwaError as exc:  # an option or args error, named after the schedule
        raise InvalidSchedule(f"schedule {name!r}: {exc}") from exc
    registry.add_schedule(definition)
    return definition


def _optional(check: Callable[[object], T], value: object) -> T | None:
    """None stays None (the `@job` declaration decides at sync); anything else is checked."""
    return None if value is None else check(value)


def _metadata(metadata: dict[str, Any] | None) -> str:
    check_metadata(metadata)
    return dumps(metadata or {}, what="metadata")


def _kind(args: Any, kind: str | None) -> str:
    if kind is not None:
        return check_kind(kind)
    if isinstance(args, dict):
        raise InvalidSchedule(
            "a schedule of dict args needs kind= naming its handler; or pass an args "
            "dataclass instance"
        )
    return check_kind(kind_for(type(args)))
