"""The in-process registry: kinds → handlers and kinds → lifecycle hooks.

It knows nothing of storage or the worker (DESIGN §9). Hooks belong in
`AppConfig.ready()`: a worker calls `registry.mark_started()` once it runs, and a hook
registered after that is accepted with a warning, because worker processes that are
already running never see it (docs/decisions/004-hook-semantics.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from awa_django.events import ALL_EVENTS, Event
from awa_django.exceptions import InvalidSchedule
from awa_django.keys import KeyFunction
from awa_django.limits import RateLimit

if TYPE_CHECKING:
    from awa_django.registry.schedules import ScheduleDefinition
from awa_django.unique import UniqueOpts

logger = logging.getLogger("awa_django.hooks")

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def kind_for(args_type: type) -> str:
    """snake_case of the args class name: SendEmail → send_email, HTMLToPDF → html_to_pdf."""
    explicit = getattr(args_type, "__awa_kind__", None)
    if isinstance(explicit, str):
        return explicit
    return _CAMEL_BOUNDARY.sub("_", args_type.__name__).lower()


@dataclass(frozen=True, slots=True)
class JobDefinition:
    kind: str
    args_type: type | None
    handler: Callable[..., Any]
    queue: str
    max_attempts: int
    priority: int
    unique: UniqueOpts | None = None  # the default of every enqueue of this kind
    # True/False as declared; None: the queue's `atomic` default (def handlers only).
    atomic: bool | None = None
    # The function giving a job's concurrency key from its args (None: the kind has none),
    # and the per-key limits declared (None: the queue's defaults). Decision 045.
    concurrency_key: KeyFunction | None = None
    max_in_flight: int | None = None
    key_rate_limit: RateLimit | None = None
    # Asked for every attempt: worked out once (inspect's answer costs 2 % of a no-op job).
    is_async: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.handler))

    def runs_atomic(self, queue_default: bool) -> bool:
        """Whether an attempt runs in one transaction with its completion: the declared
        `atomic`, else the default of the job's queue, which async handlers never take."""
        if self.atomic is not None:
            return self.atomic
        return queue_default and not self.is_async


@dataclass(frozen=True, slots=True)
class FollowUpRegistration:
    """A builder of follow-up jobs for one kind and one outcome event
    (`on_completed_enqueue` & co.); `args_type` decodes the job's args for it."""

    kind: str
    event: type[Event]
    build: Callable[[Any, Any], Any]
    args_type: type


@dataclass(frozen=True, slots=True)
class HookRegistration:
    kind: str | None  # None: every kind (on_any_event)
    hook: Callable[[Any], Any]
    events: frozenset[type[Event]]
    args_type: type | None  # set for typed hooks: event.args is decoded into it
    # For kind=None hooks that only care about some kinds (the django.tasks signal hook):
    # a cheap predicate on the kind, so the worker skips dispatch for every other job. It
    # must depend on the kind alone: Registry.wants remembers its answers.
    applies_to: Callable[[str], bool] | None = None

    def matches(self, kind: str) -> bool:
        if self.kind is not None:
            return self.kind == kind
        return self.applies_to is None or self.applies_to(kind)


# Kinds x event types whose answer wants() keeps; beyond it (kinds without end, from bad
# rows) it starts over rather than grow.
WANTS_CACHE_SIZE = 4096


class Registry:
    def __init__(self) -> None:
        self._jobs: dict[str, JobDefinition] = {}
        # Replaced, never mutated, so a dispatch in another thread iterates a stable tuple.
        self._hooks: tuple[HookRegistration, ...] = ()
        # wants() answers per (kind, event type), for the hooks registered when it asked
        # (the worker asks twice per attempt). Keyed by the tuple, so a change of hooks
        # starts a fresh cache; `applies_to` must depend on the kind alone.
        self._wants: tuple[tuple[HookRegistration, ...], dict[tuple[str, type[Event]], bool]] = (
            (),
            {},
        )
        self._started = False
        self._resolvers: list[Callable[[str], JobDefinition | None]] = []
        self._schedules: dict[str, ScheduleDefinition] = {}
        # Replaced, never mutated, like the hooks; keyed by (kind, event type).
        self._follow_ups: dict[tuple[str, type[Event]], tuple[FollowUpRegistration, ...]] = {}
        self._lock = threading.Lock()

    # -- handlers ---------------------------------------------------------------------
    def add_job(self, definition: JobDefinition) -> None:
        with self._lock:
            existing = self._jobs.get(definition.kind)
            if existing and existing.handler is not definition.handler:
                raise ValueError(
                    f"job kind {definition.kind!r} is already registered by "
                    f"{existing.handler.__module__}.{existing.handler.__qualname__}"
                )
            self._jobs[definition.kind] = definition

    def job(self, kind: str) -> JobDefinition | None:
        found = self._jobs.get(kind)
        if found is None:
            for resolve in self._resolvers:
                if (found := resolve(kind)) is not None:
                    break
        return found

    def declared(self, kind: str) -> JobDefinition | None:
        """The `@job` registration of `kind`, without asking the resolvers (which may
        import modules): a dict lookup, for the worker's per-job checks."""
        return self._jobs.get(kind)

    def add_resolver(self, resolve: Callable[[str], JobDefinition | None]) -> None:
        """Let another surface (the django.tasks backend) supply handlers for kinds it owns,
        looked up when no `@job` registration matches."""
        with self._lock:
            if resolve not in self._resolvers:
                self._resolvers.append(resolve)

    @property
    def resolves_on_demand(self) -> bool:
        """Kinds beyond the `@job` ones may have handlers (django.tasks import paths)."""
        return bool(self._resolvers)

    def job_for_args(self, args_type: type) -> JobDefinition | None:
        return self._jobs.get(kind_for(args_type))

    def jobs(self) -> list[JobDefinition]:
        return list(self._jobs.values())

    # -- cron schedules (registry/schedules.py) ------------------------------------------
    def add_schedule(self, definition: ScheduleDefinition) -> None:
        """Register a declared schedule; the same declaration again (a re-import) is fine,
        a different one under the same name is an error."""
        with self._lock:
            existing = self._schedules.get(definition.name)
            if existing is not None and existing != definition:
                raise InvalidSchedule(
                    f"schedule {definition.name!r} is declared twice, differently: "
                    "schedule names are unique"
                )
            self._schedules[definition.name] = definition

    def schedules(self) -> list[ScheduleDefinition]:
        """Declared schedules, by name."""
        return sorted(self._schedules.values(), key=lambda d: d.name)

    def remove_schedule_declaration(self, name: str) -> None:
        """Forget a declaration (tests); the table row stays (removal is explicit)."""
        with self._lock:
            self._schedules.pop(name, None)

    # -- hooks ------------------------------------------------------------------------
    def add_hook(self, registration: HookRegistration) -> None:
        if self._started:
            logger.warning(
                "lifecycle hook %s.%s for %s was registered after this process's worker "
                "started: it sees only events this process dispatches from now on, and "
                "worker processes that are already running never see it. Register hooks "
                "in AppConfig.ready().",
                getattr(registration.hook, "__module__", "?"),
                getattr(registration.hook, "__qualname__", registration.hook),
                "every kind" if registration.kind is None else f"kind {registration.kind!r}",
            )
        with self._lock:
            self._hooks = (*self._hooks, registration)

    def hooks_for(self, kind: str, event_type: type[Event]) -> list[HookRegistration]:
        """Hooks that want this event for this kind, in registration order."""
        return [h for h in self._hooks if event_type in h.events and h.matches(kind)]

    def wants(self, kind: str, event_type: type[Event]) -> bool:
        """Some hook wants this event for this kind (the worker's cheap filter: no list)."""
        hooks, answers = self._wants
        if hooks is not self._hooks or len(answers) > WANTS_CACHE_SIZE:
            hooks, answers = self._hooks, {}
            self._wants = (hooks, answers)
        key = (kind, event_type)
        wanted = answers.get(key)
        if wanted is None:
            wanted = answers[key] = any(event_type in h.events and h.matches(kind) for h in hooks)
        return wanted

    def remove_hook(self, registration: HookRegistration) -> None:
        with self._lock:
            self._hooks = tuple(h for h in self._hooks if h is not registration)

    def hooks(self) -> list[HookRegistration]:
        return list(self._hooks)

    def clear_hooks(self) -> None:
        with self._lock:
            self._hooks = ()

    # -- follow-up builders (registry/follow_ups.py) ------------------------------------
    def add_follow_up(self, registration: FollowUpRegistration) -> None:
        key = (registration.kind, registration.event)
        with self._lock:
            follow_ups = dict(self._follow_ups)
            follow_ups[key] = (*follow_ups.get(key, ()), registration)
            self._follow_ups = follow_ups

    def follow_ups_for(
        self, kind: str, event_type: type[Event]
    ) -> tuple[FollowUpRegistration, ...]:
        """The builders of `kind` for `event_type`, in registration order (a dict lookup:
        the worker asks it for every outcome)."""
        return self._follow_ups.get((kind, event_type), ())

    def follow_ups(self) -> list[FollowUpRegistration]:
        return [r for registrations in self._follow_ups.values() for r in registrations]

    def clear_follow_ups(self) -> None:
        with self._lock:
            self._follow_ups = {}

    def remove_follow_up(self, registration: FollowUpRegistration) -> None:
        key = (registration.kind, registration.event)
        with self._lock:
            follow_ups = dict(self._follow_ups)
            kept = tuple(r for r in follow_ups.get(key, ()) if r is not registration)
            follow_ups[key] = kept
            self._follow_ups = follow_ups

    # -- lifecycle ----------------------------------------------------------------------
    def mark_started(self, started: bool = True) -> None:
        """Called by a worker once it runs (and by tests with False to reset): from then on
        registering a hook logs a warning."""
        self._started = started

    @property
    def started(self) -> bool:
        return self._started


registry = Registry()


def normalize_events(events: Iterable[type[Event]] | None) -> frozenset[type[Event]]:
    if events is None:
        return ALL_EVENTS
    chosen = frozenset(events)
    unknown = [e for e in chosen if e not in ALL_EVENTS]
    if unknown:
        raise TypeError(f"not lifecycle events: {unknown!r}; choose from awa_django.events")
    return chosen


def validate_args_type(args_type: object) -> type:
    if not (isinstance(args_type, type) and dataclasses.is_dataclass(args_type)):
        raise TypeError(f"job args type must be a dataclass class, got {args_type!r}")
    return args_type
