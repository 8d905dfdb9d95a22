"""Bulk operations' vocabulary: `JobFilter` (which jobs), `BulkAction` (what to do to them,
and which states each action may touch) and `BulkProgress` (how far an operation got).

    from awa_django.bulk import JobFilter
    Client().bulk_retry(JobFilter(queue="email", states=("failed",), kind="send_receipt"))

The Client runs an operation in bounded chunks and records it in `awa_bulk_operations`, so a
stopped one resumes where it was (docs/bulk-operations.md, decision 018).
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from awa_django.codec import unstorable_character
from awa_django.conf import MAX_PRIORITY, MIN_PRIORITY, validate_queue_name
from awa_django.exceptions import InvalidJobFilter
from awa_django.options import MAX_KIND_CHARS, MAX_TAG_CHARS, MAX_TAGS
from awa_django.states import JobState


class BulkAction(enum.StrEnum):
    CANCEL = "cancel"
    RETRY = "retry"
    SET_PRIORITY = "set_priority"
    MOVE_QUEUE = "move_queue"
    DISCARD = "discard"

    @property
    def states(self) -> tuple[str, ...]:
        """The states this action may touch: a row in any other state is left alone."""
        return ACTION_STATES[self]


_WAITING = (
    JobState.SCHEDULED,
    JobState.WAITING_PARENTS,
    JobState.AVAILABLE,
    JobState.RETRYABLE,
    JobState.WAITING_EXTERNAL,
)
# Running jobs are never retried, re-prioritised or moved; cancel takes them as
# `Client.cancel` does (the attempt's outcome turns stale, its worker hears the hint).
ACTION_STATES: Mapping[BulkAction, tuple[str, ...]] = {
    BulkAction.CANCEL: (*_WAITING, JobState.RUNNING),
    BulkAction.RETRY: (
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.WAITING_EXTERNAL,
        JobState.RETRYABLE,
    ),
    BulkAction.SET_PRIORITY: _WAITING,
    BulkAction.MOVE_QUEUE: _WAITING,
    BulkAction.DISCARD: (JobState.FAILED,),
}
_STATE_CHARS = max(map(len, JobState.values))
_TIMES = ("created_after", "created_before", "finalized_after", "finalized_before")


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a bulk operation covers; every field left empty matches all.

    `states` narrows the action's own states (an action never touches a state outside
    `BulkAction.states`); `tags` matches jobs carrying all of them; the time bounds are
    inclusive lower (`_after`) and exclusive upper (`_before`) limits, timezone-aware.
    """

    queue: str | None = None
    kind: str | None = None
    states: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    finalized_after: dt.datetime | None = None
    finalized_before: dt.datetime | None = None

    def __post_init__(self) -> None:
        # Every value is checked here, before any SQL: PostgreSQL refuses a NUL or a lone
        # surrogate only once the statement runs (a DataError or, from psycopg, a
        # UnicodeEncodeError), after the bulk operation's row may already be written.
        if self.queue is not None:
            validate_queue_name(self.queue)
        if self.kind is not None:
            _check_text("kind", self.kind, MAX_KIND_CHARS)
        object.__setattr__(
            self, "states", _texts("states", self.states, len(JobState.values), _STATE_CHARS)
        )
        object.__setattr__(self, "tags", _texts("tags", self.tags, MAX_TAGS, MAX_TAG_CHARS))
        unknown = set(self.states) - set(JobState.values)
        if unknown:
            raise InvalidJobFilter(f"unknown state(s) {', '.join(sorted(unknown))}")
        for name in _TIMES:
            _check_moment(name, getattr(self, name))

    def states_for(self, action: BulkAction) -> tuple[str, ...]:
        """The states `action` works on under this filter; InvalidJobFilter when the filter
        names only states the action never touches (retrying completed jobs, say)."""
        if not self.states:
            return action.states
        chosen = tuple(s for s in action.states if s in self.states)
        if not chosen:
            raise InvalidJobFilter(
                f"{action.value} applies to {', '.join(action.states)} jobs; "
                f"the filter asks for {', '.join(self.states)}"
            )
        return chosen

    def to_json(self) -> dict[str, Any]:
        values = asdict(self)
        for name in _TIMES:
            values[name] = values[name].isoformat() if values[name] else None
        values["states"], values["tags"] = list(self.states), list(self.tags)
        return values

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> JobFilter:
        parsed = dict(values)
        for name in _TIMES:
            parsed[name] = dt.datetime.fromisoformat(parsed[name]) if parsed.get(name) else None
        parsed["states"] = tuple(parsed.get("states") or ())
        parsed["tags"] = tuple(parsed.get("tags") or ())
        return cls(**parsed)


def _check_text(name: str, value: object, limit: int) -> str:
    """A string its column can hold: 1-`limit` characters, no NUL, no lone surrogate."""
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise InvalidJobFilter(
            f"{name} must be a string of 1-{limit} characters, got {value!r:.60}"
        )
    if problem := unstorable_character(value):
        raise InvalidJobFilter(f"{name} {value!r:.60} contains {problem}, which no job holds")
    return value


def _texts(name: str, values: object, count: int, limit: int) -> tuple[str, ...]:
    """A list or tuple of at most `count` strings, each checked as `_check_text` does."""
    if not isinstance(values, list | tuple):
        raise InvalidJobFilter(
            f"{name} must be a tuple of strings, got {type(values).__name__} {values!r:.60}"
        )
    if len(values) > count:
        raise InvalidJobFilter(f"{name} takes at most {count} values, got {len(values)}")
    return tuple(_check_text(name.removesuffix("s"), value, limit) for value in values)


def _check_moment(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise InvalidJobFilter(f"{name} must be a timezone-aware datetime, got {value!r:.60}")
    try:
        # Compared in UTC: a moment that does not exist there (year 1 at +01:00) would fail
        # in the driver instead of here.
        value.astimezone(dt.UTC)
    except OverflowError:
        raise InvalidJobFilter(f"{name} {value.isoformat()} is out of range in UTC") from None


def check_priority(priority: object) -> int:
    """The new priority of `bulk_set_priority`, in the column's range."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidJobFilter(f"priority must be a whole number, got {priority!r:.60}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidJobFilter(f"priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}")
    return priority


@dataclass(frozen=True, slots=True)
class BulkProgress:
    """One bulk operation as its row stands: after each chunk (the `on_progress` callback)
    and when it returns.

    `matched` counts the rows the chunks looked at (filter and action's states, when read),
    `done` the rows changed, `skipped` the matched rows left alone (locked by a worker at
    that moment, changed meanwhile, or a unique-key `conflict`, also counted there).
    `total_estimate` is the count when the operation started; rows keep moving meanwhile.
    """

    id: int
    action: BulkAction
    filter: JobFilter
    state: str  # "running" (resumable) or "completed"
    matched: int
    done: int
    skipped: int
    conflicts: int
    total_estimate: int
    cursor: int  # the last job id looked at; `resume_bulk` continues after it
    priority: int | None = None  # set_priority's new priority
    target_queue: str | None = None  # move_queue's destination
    created_by: str = ""
    created_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state == "completed"

    @property
    def fraction(self) -> float:
        """Matched over the starting estimate, in 0..1 (1 once finished)."""
        if self.finished:
            return 1.0
        return min(1.0, self.matched / self.total_estimate) if self.total_estimate else 0.0
