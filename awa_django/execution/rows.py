"""The rows enqueue writes: its arguments checked and resolved against the `@job`
declaration and the defaults in `conf`, then serialised, all before any SQL.

Planning is pure (no database access), so every bad input fails here with a typed error and
the caller's transaction is never touched; `Client` then writes the plan in one statement.
It sits below the Client, in the execution layer, because follow-up insertion
(`execution/follow_ups.py`, run by attempts, rescues and callback verbs) plans its jobs
exactly as enqueue does, and no layer imports upward (decision 007).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from django.utils import timezone

from awa_django import tracing
from awa_django.channels import channel_for
from awa_django.codec import (
    dumps,
    encode_args,
    encode_args_json,
    encode_args_value,
    is_args_value,
)
from awa_django.conf import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    awa_settings,
    validate_queue_name,
)
from awa_django.exceptions import InvalidEnqueueOption, UnknownJobKind
from awa_django.keys import KEY_METADATA, KeyFunction, check_key, key_of, keyed_metadata
from awa_django.limits import RateLimit
from awa_django.options import (
    check_kind,
    check_max_attempts,
    check_metadata,
    check_priority,
    check_run_at,
    check_tags,
)
from awa_django.registry import JobDefinition, kind_for, registry
from awa_django.states import JobState
from awa_django.storage.sql.jobs import BulkColumns, RowColumns
from awa_django.unique import UniqueOpts, key_for

# `unique=` of one call: the options, False to opt out of the kind's `@job(unique=...)`,
# None (or left out) for that declaration.
UniqueOption = UniqueOpts | Literal[False] | None


class EnqueueKwargs(TypedDict, total=False):
    """The keyword options of `enqueue`, `enqueue_many` and their twins, declared once:
    every signature takes them as `**options: Unpack[EnqueueKwargs]`, so editors and mypy
    see each one. All optional; None means the `@job` declaration's value, else `conf`'s.

    kind: the handler's kind (required for dict args; derived from the dataclass otherwise)
    queue, priority (lower runs first, 1 urgent .. 4 batch), run_at (aware datetime: the
    job is scheduled until then), max_attempts, tags (at most 20 strings), metadata (dict),
    unique (UniqueOpts: refuse a duplicate of a live job, raising UniqueConflict; False:
    not unique even if the kind's `@job(unique=...)` says so), concurrency_key (a str or
    int: this job's key instead of the one `@job(concurrency_key=...)` gives it).
    """

    kind: str | None
    queue: str | None
    priority: int | None
    run_at: dt.datetime | None
    max_attempts: int | None
    tags: Sequence[str]
    metadata: dict[str, Any] | None
    unique: UniqueOption
    concurrency_key: str | int | None


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """The options of one enqueue call as the caller gave them. None means: the `@job`
    declaration's value for this kind, else the default in `conf`."""

    kind: str | None = None
    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    max_attempts: int | None = None
    tags: Sequence[str] = ()
    metadata: dict[str, Any] | None = None
    unique: UniqueOption = None
    concurrency_key: str | int | None = None


# The options of a call that gives none.
NO_OPTIONS = EnqueueOptions()


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """Everything about a row except its args, checked and serialised: resolved once per
    enqueue call, or once per args type in `enqueue_many`."""

    kind: str
    queue: str
    state: str
    priority: int
    max_attempts: int
    run_at: dt.datetime | None
    metadata: str  # JSON text
    tags: list[str]
    tags_json: str  # job_insert_many takes each row's tags as JSON: no ragged text[][]
    unique: UniqueOpts | None = None
    # Per-key concurrency (decision 045): whether this template's rows may have a key; the
    # key of this call, else the function that gives each job its key; the limits the
    # `@job` declares (None: the queue's settings, read per row, since templates are kept).
    has_key: bool = False
    key: str | None = None
    key_function: KeyFunction | None = None
    declared_max: int | None = None
    declared_rate: RateLimit | None = None

    @property
    def carries_key(self) -> bool:
        """Whether this row's metadata gives it a concurrency key (after `keyed`)."""
        return not self.has_key and KEY_METADATA in self.metadata

    def keyed(self, args: Any) -> JobTemplate:
        """This template for one job of `args`: with its key in the metadata, where the
        insert trigger finds it, or itself for a job without a key."""
        if not self.has_key:
            return self
        key = self.key
        if key is None and self.key_function is not None:
            key = key_of(self.key_function, args, self.kind)
        if key is None:
            return self
        limits = awa_settings().queue(self.queue).key_limits(self.declared_max, self.declared_rate)
        metadata = dumps(
            keyed_metadata(self.metadata, key, limits), what="metadata", limit=_limit()
        )
        return dataclasses.replace(self, metadata=metadata, has_key=False)

    def unique_key(self, args_json: str, now: dt.datetime | None = None) -> bytes | None:
        """The row's unique key (None for a job that is not unique); `now` buckets a job
        without run_at under by_period (default: this instant)."""
        if self.unique is None:
            return None
        run_at = self.run_at or now
        return key_for(
            self.unique, kind=self.kind, queue=self.queue, args_json=args_json, run_at=run_at
        )

    @property
    def what(self) -> str:
        """How errors name the args of this row."""
        return f"args of {self.kind}"

    @property
    def channels(self) -> list[str]:
        """The NOTIFY channel to wake, none for a scheduled job (promotion wakes it)."""
        return [channel_for(self.queue)] if self.state == JobState.AVAILABLE else []

    def columns(self, args: str, django_task: str | None) -> RowColumns:
        """This row with its args (JSON text) as the insert statements take it."""
        return RowColumns(
            kind=self.kind,
            queue=self.queue,
            args=args,
            state=self.state,
            priority=self.priority,
            max_attempts=self.max_attempts,
            run_at=self.run_at,
            metadata=self.metadata,
            tags=self.tags,
            django_task=django_task,
            channels=self.channels,
        )


@dataclass(frozen=True, slots=True)
class BulkRows:
    """`enqueue_many`'s planned rows: each one's template and args (JSON text), written
    by COPY (storage/sql/job_copy.py) or as the parallel arrays of `columns()`."""

    rows: list[tuple[JobTemplate, str]]
    channels: list[str]  # the distinct NOTIFY channels of the available rows
    # Set only when some row is unique (then job_insert_many_unique writes them).
    unique_keys: list[bytes | None] | None = None
    unique_states: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def kind_at(self, position: int) -> str:
        return self.rows[position][0].kind

    def columns(self) -> BulkColumns:
        """The rows as the parallel arrays the bulk insert statements take."""
        rows = self.rows
        return BulkColumns(
            kinds=[t.kind for t, _ in rows],
            queues=[t.queue for t, _ in rows],
            args=[a for _, a in rows],
            states=[t.state for t, _ in rows],
            priorities=[t.priority for t, _ in rows],
            max_attempts=[t.max_attempts for t, _ in rows],
            run_ats=[t.run_at for t, _ in rows],
            metadata=[t.metadata for t, _ in rows],
            tags=[t.tags_json for t, _ in rows],
            channels=self.channels,
        )


def plan_template(args: Any, options: EnqueueOptions) -> JobTemplate:
    """Check every option of a job of `args` (not the args themselves)."""
    key = _memo_key(args, options)
    if key is not None and (memo := _templates.get(key)) is not None:
        definition, template = memo
        if registry.job(template.kind) is definition:
            return template
    kind = _kind(args, options.kind)
    # Looked up only after check_kind: a registry resolver may import a module by kind.
    definition = registry.job(kind)
    template = _plan_template(kind, definition, options)
    if key is not None:
        if len(_templates) >= _TEMPLATES_KEPT:
            _templates.clear()
        _templates[key] = (definition, template)
    return template


# Templates of calls that carry no per-call input (no run_at, no metadata, no current
# trace), by args type and options. Planning one is about 20 us of a 500 us enqueue, and
# a service enqueues its few kinds with the same options over and over. An entry is used
# while its kind's declaration is the same object (a re-registration, or a resolver that
# answers differently, plans afresh). The one setting planning reads, max_args_bytes,
# bounds the metadata, which is "{}" in every template kept.
_TEMPLATES_KEPT = 1024
_templates: dict[tuple[object, ...], tuple[JobDefinition | None, JobTemplate]] = {}
_PLAIN = (str, int)


def _memo_key(args: Any, options: EnqueueOptions) -> tuple[object, ...] | None:
    """`_templates`' key for this call, None when its template must be planned afresh.
    Option values count only when their type is exactly str or int, since equal values
    of other types (True == 1, 1.0 == 1) hash alike and must still be refused."""
    if options.run_at is not None or options.metadata is not None or options.unique is not None:
        return None
    if options.concurrency_key is not None:
        return None
    values = (options.kind, options.queue, options.priority, options.max_attempts)
    if any(v is not None and type(v) not in _PLAIN for v in values):
        return None
    tags = options.tags
    if type(tags) not in (list, tuple) or any(type(t) is not str for t in tags):
        return None
    if tracing.current_traceparent() is not None:
        return None
    # The explicit kind a later `@job(kind=...)` may give the args class is part of the key.
    args_type = type(args)
    return (args_type, getattr(args_type, "__awa_kind__", None), *values, tuple(tags))


def _plan_template(
    kind: str, definition: JobDefinition | None, options: EnqueueOptions
) -> JobTemplate:
    queue, priority, max_attempts = _declared(definition)
    run_at = check_run_at(options.run_at)
    check_metadata(options.metadata)
    if options.metadata and KEY_METADATA in options.metadata:
        raise InvalidEnqueueOption(
            f"metadata[{KEY_METADATA!r}] is reserved for the job's concurrency key: "
            "pass concurrency_key= instead"
        )
    tags = check_tags(options.tags)
    queue = validate_queue_name(queue if options.queue is None else options.queue)
    key = None if options.concurrency_key is None else check_key(options.concurrency_key)
    key_function = definition.concurrency_key if definition is not None else None
    return JobTemplate(
        kind=kind,
        queue=queue,
        state=JobState.AVAILABLE if run_at is None else JobState.SCHEDULED,
        priority=check_priority(priority if options.priority is None else options.priority),
        max_attempts=check_max_attempts(
            max_attempts if options.max_attempts is None else options.max_attempts
        ),
        run_at=run_at,
        # The enqueuing span's traceparent, when OpenTelemetry traces (decision 022).
        metadata=dumps(
            tracing.with_traceparent(options.metadata or {}), what="metadata", limit=_limit()
        ),
        tags=tags,
        tags_json=dumps(tags, what="tags"),
        unique=_unique(options.unique, definition),
        has_key=bool(key or key_function),
        key=key,
        key_function=key_function,
        declared_max=definition.max_in_flight if definition is not None else None,
        declared_rate=definition.key_rate_limit if definition is not None else None,
    )


def plan_one(args: Any, options: EnqueueOptions) -> tuple[JobTemplate, str]:
    """The template of one job and its args as JSON text."""
    template = plan_template(args, options)
    return template.keyed(args), encode_args_json(args, what=template.what, limit=_limit())


def plan_many(jobs: Iterable[Any], options: EnqueueOptions) -> BulkRows:
    """Every job's row. Options are resolved once per args type, since they are shared by
    every job of it; per job only its args are serialised. The bulk-insert hot path."""
    limit = _limit()
    templates: dict[type, tuple[JobTemplate, str]] = {}
    rows: list[tuple[JobTemplate, str]] = []
    for args in _each(jobs):
        planned = templates.get(type(args))
        if planned is None:
            template = plan_template(args, options)
            if not is_args_value(args):  # decided by the type: asked once per type
                encode_args(args)  # raises the SerializationError that names it
            planned = templates[type(args)] = (template, template.what)
        template, what = planned
        if template.has_key:
            template = template.keyed(args)
        rows.append((template, encode_args_value(args, what=what, limit=limit)))
    channels = sorted({c for t, _ in templates.values() for c in t.channels})
    bulk = BulkRows(rows, channels)
    if any(t.unique is not None for t, _ in templates.values()):
        return _with_keys(bulk, rows)
    return bulk  # not a single key to compute: the plain bulk insert's rows, at its speed


def plan_rows(jobs: Sequence[tuple[Any, EnqueueOptions]]) -> BulkRows:
    """Rows for jobs that each carry their own options (follow-up jobs), for one bulk
    insert; checked exactly as `enqueue` checks one job."""
    rows = [plan_one(args, options) for args, options in jobs]
    channels = sorted({c for t, _ in rows for c in t.channels})
    bulk = BulkRows(rows, channels)
    if any(t.unique is not None for t, _ in rows):
        return _with_keys(bulk, rows)
    return bulk


def _with_keys(bulk: BulkRows, rows: list[tuple[JobTemplate, str]]) -> BulkRows:
    now = timezone.now()  # one instant buckets every row without run_at
    return dataclasses.replace(
        bulk,
        unique_keys=[t.unique_key(a, now) for t, a in rows],
        unique_states=[t.unique.states_mask if t.unique else None for t, _ in rows],
    )


def _kind(args: Any, kind: str | None) -> str:
    if kind is not None:
        return check_kind(kind)
    if isinstance(args, dict):
        raise UnknownJobKind(
            "enqueueing a dict needs an explicit kind= naming its handler, e.g. "
            "enqueue({...}, kind='send_receipt'); or enqueue an args dataclass instance"
        )
    return check_kind(kind_for(type(args)))


def _declared(definition: JobDefinition | None) -> tuple[str, int, int]:
    """Queue, priority and max_attempts of the `@job` declaration, else of `conf`."""
    if definition is None:
        return DEFAULT_QUEUE, DEFAULT_PRIORITY, DEFAULT_MAX_ATTEMPTS
    return definition.queue, definition.priority, definition.max_attempts


def _unique(chosen: object, definition: JobDefinition | None) -> UniqueOpts | None:
    """This call's UniqueOpts, else the `@job` declaration's; False opts out of both."""
    if chosen is None:
        return definition.unique if definition is not None else None
    if chosen is False:
        return None
    if isinstance(chosen, UniqueOpts):
        return chosen
    raise InvalidEnqueueOption(
        f"unique must be a UniqueOpts, False (not unique) or None (the @job default), "
        f"got {chosen!r:.100}"
    )


def _each(jobs: Iterable[Any]) -> Iterator[Any]:
    if isinstance(jobs, str | bytes | dict) or dataclasses.is_dataclass(jobs):
        raise InvalidEnqueueOption(
            "enqueue_many takes an iterable of args (a list of dataclass instances); "
            f"got one {type(jobs).__name__}: use enqueue() for a single job"
        )
    try:
        return iter(jobs)
    except TypeError:
        raise InvalidEnqueueOption(
            f"enqueue_many takes an iterable of args, got {type(jobs).__name__}"
        ) from None


def _limit() -> int:
    return awa_settings().max_args_bytes
