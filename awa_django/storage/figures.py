"""Queue operations and figures for operators: pause/resume, per-queue stats, live workers.

Everything here is plain ORM on the control tables and on indexes `Job.Meta` declares; the
dashboard, `awa_status` and scripts share it. Times are compared with the database clock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count, DurationField, ExpressionWrapper, Min, Q
from django.db.models.functions import Now

from awa_django.conf import awa_settings, validate_queue_name
from awa_django.states import JobState
from awa_django.storage.models import Job, QueueState, WorkerInstance

# Depth counts every state but `completed`: completed rows pile up until pruning and are
# reported as throughput instead, so the count never walks the retained history.
DEPTH_STATES: tuple[str, ...] = tuple(s for s in JobState.values if s != JobState.COMPLETED)


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
    paused_at: dt.datetime | None = None

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
        }


def _using(using: str | None) -> str:
    return using or awa_settings().database


# -- pause / resume -----------------------------------------------------------------------
def pause_queue(queue: str, by: str = "", *, using: str | None = None) -> QueueState:
    """Stop dispatch of `queue` on every worker (running attempts finish); idempotent."""
    validate_queue_name(queue)
    state, _ = QueueState.objects.using(_using(using)).update_or_create(
        queue=queue, defaults={"paused": True, "paused_at": Now(), "paused_by": by[:200]}
    )
    state.refresh_from_db(fields=["paused_at"])
    return state


def resume_queue(queue: str, *, using: str | None = None) -> QueueState:
    """Let workers claim from `queue` again; idempotent."""
    validate_queue_name(queue)
    state, _ = QueueState.objects.using(_using(using)).update_or_create(
        queue=queue, defaults={"paused": False, "paused_at": None, "paused_by": ""}
    )
    return state


# -- figures ------------------------------------------------------------------------------
def queue_stats(window_minutes: int = 5, *, using: str | None = None) -> list[QueueStats]:
    """Per-queue depth by state, throughput, lag and paused flag, sorted by queue name.

    Lists every configured queue, every queue that has jobs and every paused queue. Four
    queries, each served by an index: (queue, state), the finalized partial index, the
    dispatch partial index, and the queue-state primary key.
    """
    if window_minutes < 1:
        raise ValueError("window_minutes must be at least 1")
    db = _using(using)
    depth = _depth(db)
    completed = _completed(db, window_minutes)
    lag = _lag(db)
    paused = {q.queue: q for q in QueueState.objects.using(db).all()}
    names = sorted(set(awa_settings().queues) | set(depth) | set(completed) | set(paused))
    return [_stats(name, depth, completed, lag, paused.get(name), window_minutes) for name in names]


def _stats(
    name: str,
    depth: dict[str, dict[str, int]],
    completed: dict[str, tuple[int, int]],
    lag: dict[str, float],
    state: QueueState | None,
    window_minutes: int,
) -> QueueStats:
    last_minute, in_window = completed.get(name, (0, 0))
    return QueueStats(
        queue=name,
        depth=depth.get(name, {}),
        completed_last_minute=last_minute,
        completed_in_window=in_window,
        window_minutes=window_minutes,
        lag_seconds=lag.get(name),
        paused=bool(state and state.paused),
        paused_by=state.paused_by if state else "",
        paused_at=state.paused_at if state else None,
    )


def _depth(db: str) -> dict[str, dict[str, int]]:
    # order_by() drops Meta.ordering, which would otherwise join the GROUP BY.
    rows = (
        Job.objects.using(db)
        .filter(state__in=DEPTH_STATES)
        .values("queue", "state")
        .annotate(n=Count("*"))
        .order_by()
    )
    depth: dict[str, dict[str, int]] = {}
    for row in rows:
        depth.setdefault(row["queue"], {})[row["state"]] = row["n"]
    return depth


def _completed(db: str, window_minutes: int) -> dict[str, tuple[int, int]]:
    window_start = Now() - dt.timedelta(minutes=window_minutes)
    minute_start = Now() - dt.timedelta(minutes=1)
    rows = (
        Job.objects.using(db)
        .filter(state=JobState.COMPLETED, finalized_at__gte=window_start)
        .values("queue")
        .annotate(window=Count("*"), minute=Count("id", filter=Q(finalized_at__gte=minute_start)))
        .order_by()
    )
    return {r["queue"]: (r["minute"], r["window"]) for r in rows}


def _lag(db: str) -> dict[str, float]:
    # run_at is when an available job became due, so now() - min(run_at) is how long the
    # oldest one has waited for a worker (a scheduled job does not count until due).
    age = ExpressionWrapper(Now() - Min("run_at"), output_field=DurationField())
    rows = (
        Job.objects.using(db)
        .filter(state=JobState.AVAILABLE)
        .values("queue")
        .annotate(age=age)
        .order_by()
    )
    return {r["queue"]: max(r["age"].total_seconds(), 0.0) for r in rows}


def live_workers(
    within_seconds: float | None = None, *, using: str | None = None
) -> list[WorkerInstance]:
    """Worker processes seen within `within_seconds` (default: the heartbeat staleness),
    leader first, then by host and pid."""
    if within_seconds is None:
        within_seconds = awa_settings().heartbeat_staleness
    since = Now() - dt.timedelta(seconds=within_seconds)
    workers = WorkerInstance.objects.using(_using(using)).filter(last_seen_at__gte=since)
    return list(workers.order_by("-leader", "hostname", "pid"))


def unhandled_kinds(*, using: str | None = None) -> dict[str, int]:
    """Kinds with jobs waiting to run (scheduled, available, retryable) that no live worker
    has a handler for, with how many jobs wait: what a rolling deploy hands back, or a
    kind whose worker is missing. Empty while no worker is live (nothing to compare with).
    Cost: one pass over the waiting jobs, like the queue depths, plus the worker rows."""
    workers = live_workers(using=using)
    if not workers:
        return {}
    handled = {kind for worker in workers for kind in (worker.kinds or [])}
    serves_tasks = any(worker.serves_tasks for worker in workers)
    waiting = (
        Job.objects.using(_using(using))
        .filter(state__in=(JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE))
        .values("kind")
        .annotate(n=Count("*"))
        .order_by()
    )
    return {
        row["kind"]: row["n"]
        for row in waiting
        if row["kind"] not in handled and not (serves_tasks and "." in row["kind"])
    }


def format_duration(seconds: float | None) -> str:
    """Compact age for people: '42s', '3m 12s', '2h 5m', '4d 1h'; '-' for None."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"
