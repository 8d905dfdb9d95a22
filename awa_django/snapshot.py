"""Immutable snapshots the Client hands out: `JobSnapshot` (one committed `awa_jobs_hot`
row), `ScheduleSnapshot` (one cron schedule), `DeadLetterSnapshot` (one dead letter), and
the operators' figures `QueueStats` (one queue at one moment) and `LiveWorker` (one worker
process as it last reported in)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from typing import Any

from awa_django.limits import RateLimit
from awa_django.states import DEPTH_STATES, TERMINAL_STATES, JobState


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    state: str
    priority: int
    attempt: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    attempted_at: datetime | None
    finalized_at: datetime | None
    run_lease: int
    errors: list[dict[str, Any]]
    metadata: dict[str, Any]
    tags: list[str]
    progress: dict[str, Any] | None
    callback_id: uuid.UUID | None
    callback_timeout_at: datetime | None
    result: Any
    attempted_by: list[str]
    # The django.tasks marker ({"backend", "run_after"}) of a job enqueued as a Django task.
    django_task: dict[str, Any] | None = None
    # The enqueued priority while priority aging has lifted `priority` (None: not aged).
    original_priority: int | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> JobSnapshot:
        values = {name: row[name] for name in COLUMNS}
        # The named statements return every jsonb column as text (fragments.JOB_COLUMNS), on
        # Django's connection and the runtime's alike; decoded values (ORM .values()) pass.
        for name in JSON_COLUMNS:
            if isinstance(values[name], str):
                values[name] = json.loads(values[name])
        return cls(**values)

    @classmethod
    def from_row(cls, values: Sequence[Any]) -> JobSnapshot:
        """From a row whose first columns are fragments.JOB_COLUMNS, by position (the hot
        path: claims, completions and enqueue build one per job)."""
        decoded = list(values[: len(COLUMNS)])
        for index in _JSON_INDEXES:
            text = decoded[index]
            if isinstance(text, str):
                # Most rows carry no errors and no metadata: skip the decoder for those.
                decoded[index] = [] if text == "[]" else {} if text == "{}" else json.loads(text)
        return assemble(*decoded)


JSON_COLUMNS = ("args", "errors", "metadata", "progress", "result", "django_task")
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(JobSnapshot))
_JSON_INDEXES = tuple(COLUMNS.index(name) for name in JSON_COLUMNS)


def _assembler() -> Callable[..., JobSnapshot]:
    """A function of every column, in COLUMNS order, that builds the JobSnapshot as its
    __init__ would, setting each slot through its own descriptor. The frozen dataclass's
    __init__ calls object.__setattr__ once per field: 2.8 us a row against 1.3 us here,
    and the worker builds two rows per job (its claim and its completion)."""
    # What __init__ would do beyond setting each field from its argument, this cannot.
    assert not hasattr(JobSnapshot, "__post_init__")
    assert all(f.init and f.default_factory is MISSING for f in fields(JobSnapshot))
    setters = {f"set_{name}": getattr(JobSnapshot, name).__set__ for name in COLUMNS}
    source = f"def assemble({', '.join(COLUMNS)}):\n    row = new(JobSnapshot)\n"
    source += "".join(f"    set_{name}(row, {name})\n" for name in COLUMNS)
    source += "    return row\n"
    namespace: dict[str, Any] = {**setters, "new": object.__new__, "JobSnapshot": JobSnapshot}
    exec(source, namespace)
    assemble: Callable[..., JobSnapshot] = namespace["assemble"]
    return assemble


# JobSnapshot(*values) for values of every column, for the hot paths (from_row, the
# completer's rows); no defaults, no checks, the same object.
assemble = _assembler()


@dataclass(frozen=True, slots=True)
class QueueStats:
    """The figures of one queue at one moment."""

    queue: str
    depth: dict[str, int] = field(default_factory=dict)
    completed_last_minute: int = 0
    completed_in_window: int = 0
    window_minutes: int = 5
    lag_seconds: float | None = None  # age of the oldest available job; None when none
    paused: bool = False
    paused_by: str = ""
    paused_at: datetime | None = None
    # Runtime overrides (Client.set_queue_limits); None: the queue's settings apply.
    concurrency_override: int | None = None
    rate_override: RateLimit | None = None
    # The limits in force, as text: settings, with overrides marked (docs/flow-control.md).
    limits: str = ""
    # Jobs of the queue that failed for good into the dead letters, still kept there: the
    # failures of a dead-letter queue, which never stay among its failed jobs.
    dead_letters: int = 0

    @property
    def running(self) -> int:
        return self.depth.get(JobState.RUNNING, 0)

    @property
    def available(self) -> int:
        return self.depth.get(JobState.AVAILABLE, 0)

    @property
    def throughput_per_minute(self) -> float:
        return self.completed_in_window / self.window_minutes

    def as_dict(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "depth": {s: self.depth.get(s, 0) for s in DEPTH_STATES},
            "running": self.running,
            "completed_last_minute": self.completed_last_minute,
            "completed_in_window": self.completed_in_window,
            "window_minutes": self.window_minutes,
            "throughput_per_minute": round(self.throughput_per_minute, 2),
            "lag_seconds": None if self.lag_seconds is None else round(self.lag_seconds, 3),
            "paused": self.paused,
            "paused_by": self.paused_by,
            "paused_at": self.paused_at.isoformat() if self.paused_at else None,
            "concurrency_override": self.concurrency_override,
            "rate_override": (
                None
                if self.rate_override is None
                else {"rate": self.rate_override.rate, "burst": self.rate_override.burst}
            ),
            "limits": self.limits,
            "dead_letters": self.dead_letters,
        }


@dataclass(frozen=True, slots=True)
class LiveWorker:
    """One worker process as it last reported in (a row of `awa_worker_instances`)."""

    worker_id: str
    hostname: str
    pid: int
    queues: Any  # as the runtime registered it: {queue: concurrency}
    started_at: datetime
    last_seen_at: datetime
    leader: bool
    shutting_down: bool
    completed_count: int
    kinds: list[str] = field(default_factory=list)  # the kinds it has handlers for
    serves_tasks: bool = False  # also resolves django.tasks kinds (import paths)
    hooks_dropped: int = 0  # lifecycle events its full hook backlog dropped


@dataclass(frozen=True, slots=True)
class ScheduleSnapshot:
    """One cron schedule as its table row stands, with its next fire time (computed from
    the database clock; None while paused)."""

    name: str
    expression: str
    timezone: str
    kind: str
    args: dict[str, Any]
    queue: str
    priority: int
    max_attempts: int
    missed_fire_policy: str
    paused: bool
    paused_at: datetime | None
    paused_by: str
    last_fire_at: datetime | None  # the last scheduled fire (manual triggers not counted)
    last_job_id: int | None  # the job of the last fire or manual trigger
    next_fire_at: datetime | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class DeadLetterSnapshot:
    """One dead letter: a job of a dead-letter queue that failed for good, as it left
    `awa_jobs_hot` (`id` is the job's id), with why and when (docs/dead-letters.md)."""

    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    priority: int
    attempt: int
    max_attempts: int
    run_lease: int
    created_at: datetime
    attempted_at: datetime | None
    errors: list[dict[str, Any]]
    metadata: dict[str, Any]
    tags: list[str]
    progress: dict[str, Any] | None
    attempted_by: list[str]
    reason: str
    dead_lettered_at: datetime

    @property
    def error(self) -> str:
        """The last error entry's text ("" when there is none)."""
        return str(self.errors[-1].get("error", "")) if self.errors else ""


DEAD_LETTER_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(DeadLetterSnapshot))


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """One page of dead letters, newest first. `next_cursor` (None on the last page) is
    passed as `after=` to read the next page; it stays valid while rows come and go."""

    items: tuple[DeadLetterSnapshot, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class DeadLetterRetry:
    """What a bulk retry of dead letters did: the ids back among the jobs, and the ids left
    among the dead letters because a live job holds their unique key."""

    retried: tuple[int, ...] = ()
    conflicts: tuple[int, ...] = ()


# -- history (decision 021): what the dashboard's charts and `awa_status --check` read ----
@dataclass(frozen=True, slots=True)
class RollupPoint:
    """One queue's figures for one minute (a row of `awa_queue_rollups`)."""

    queue: str
    minute: datetime
    completed: int
    failed: int
    cancelled: int
    retried: int
    wait_p50: float | None
    wait_p95: float | None
    run_p50: float | None
    run_p95: float | None
    depth: int | None
    lag_seconds: float | None


@dataclass(frozen=True, slots=True)
class KindFigures:
    """One kind's finalized jobs over a window: counts, failure rate, p95 run time."""

    kind: str
    completed: int
    failed: int
    cancelled: int
    p95_seconds: float | None

    @property
    def count(self) -> int:
        return self.completed + self.failed + self.cancelled

    @property
    def failure_rate(self) -> float:
        """Failed among completed and failed (cancelled jobs did not fail)."""
        ended = self.completed + self.failed
        return self.failed / ended if ended else 0.0


@dataclass(frozen=True, slots=True)
class KeyFigures:
    """One concurrency key as operators see it: its text (as enqueued, up to 200
    characters), the jobs holding its slots and the jobs waiting for one."""

    key: str
    in_flight: int
    waiting: int


@dataclass(frozen=True, slots=True)
class ParentResult:
    """One parent of a job, as its child reads it (`JobContext.parent_results()`,
    `Client.parents()`): how it ended (`state`: completed, failed or cancelled; None while
    it has not) and, once completed, the result its handler stored (`job.result = ...`).
    `dead_lettered`: it failed into the dead letters (state `failed`, no result)."""

    id: int
    kind: str | None  # None: the parent row is gone (pruned after every child ended)
    state: str | None
    result: Any = None
    dead_lettered: bool = False

    @property
    def failed(self) -> bool:
        """It ended without completing (failed for good, cancelled or dead-lettered)."""
        return self.state in ("failed", "cancelled")


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """A batch's members counted by how they ended (`Client.batch_progress`). `failed`
    includes dead-lettered members. `finished_at` is set when the last member ended."""

    batch_id: int
    total: int
    completed: int
    failed: int
    cancelled: int
    created_at: datetime
    finished_at: datetime | None
    on_success_id: int | None
    on_complete_id: int | None

    @property
    def ended(self) -> int:
        return self.completed + self.failed + self.cancelled

    @property
    def pending(self) -> int:
        return self.total - self.ended

    @property
    def is_finished(self) -> bool:
        return self.ended >= self.total


# A flow node's state when the job is no longer in the jobs table (docs/workflows.md):
# moved to the dead letters, or pruned once nothing waited on it any more.
DEAD_LETTERED = "dead_lettered"
GONE = "gone"


@dataclass(frozen=True, slots=True)
class FlowNode:
    """One job of a flow: its live state (or DEAD_LETTERED / GONE), and the parents of it
    that the flow shows. `generation`: 0 for a job none of whose shown parents is in the
    flow, else one more than its latest shown parent's."""

    id: int
    kind: str
    queue: str
    state: str
    parents: tuple[int, ...]
    generation: int = 0


@dataclass(frozen=True, slots=True)
class JobWaiting:
    """A child's counters (`awa_job_waits`): parents not yet ended, parents failed, its
    `on_parent_failure` policy."""

    pending_parents: int
    failed_parents: int
    on_parent_failure: str


@dataclass(frozen=True, slots=True)
class JobFlow:
    """The jobs reachable from `job_id` through dependency edges (parents and children, at
    most `depth` steps away), at most `limit` of them, ordered by generation then id.
    `truncated`: more jobs are connected than shown. `parent_count` / `child_count`: the
    job's own parents and children, all of them (the flow may show fewer)."""

    job_id: int
    nodes: tuple[FlowNode, ...]
    truncated: bool
    parent_count: int
    child_count: int
    waiting: JobWaiting | None
    batch_id: int | None

    def node(self, job_id: int) -> FlowNode | None:
        return next((n for n in self.nodes if n.id == job_id), None)

    @property
    def parents(self) -> list[FlowNode]:
        """The job's parents among the nodes shown."""
        own = self.node(self.job_id)
        return [n for n in self.nodes if own is not None and n.id in own.parents]

    @property
    def children(self) -> list[FlowNode]:
        """The job's children among the nodes shown."""
        return [n for n in self.nodes if self.job_id in n.parents]
