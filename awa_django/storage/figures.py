"""Figures for operators, read-only: per-queue stats and live workers.

Plain ORM on the control tables and on indexes `Job.Meta` declares. Surfaces (the dashboard,
`awa_status`) reach them through `Client.queue_stats()` / `Client.live_workers()`; changing a
queue (pause, resume) is the Client's too. Times are compared with the database clock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import fields, replace

from django.db.models import Count, DurationField, ExpressionWrapper, Min, Q
from django.db.models.functions import Now

from awa_django.conf import QueueConfig, awa_settings
from awa_django.limits import RateLimit
from awa_django.snapshot import LiveWorker, QueueStats
from awa_django.states import DEPTH_STATES, WAITING_STATES, JobState
from awa_django.storage.models import (
    INDEXED_DEPTH_STATES,
    DeadLetter,
    Job,
    QueueState,
    WorkerInstance,
)

__all__ = [
    "DEPTH_STATES",
    "LiveWorker",
    "QueueStats",
    "live_workers",
    "queue_stats",
    "queues_with_state",
]


def _using(using: str | None) -> str:
    return using or awa_settings().database


# -- figures ------------------------------------------------------------------------------
def queue_stats(window_minutes: int = 5, *, using: str | None = None) -> list[QueueStats]:
    """Per-queue depth by state, dead letters, throughput, lag and paused flag, sorted by
    queue name.

    Lists every configured queue, every queue that has jobs and every paused queue. Four
    queries, each served by an index: the partial state index (the depth of every state but
    `available`; it carries the queue), the dispatch partial index (`available` jobs: their
    depth and lag), the finalized partial index, and the queue-state primary key; a fifth
    counts the dead letters per queue on their queue index. The two depth queries read only
    their indexes, never the table.
    """
    if window_minutes < 1:
        raise ValueError("window_minutes must be at least 1")
    db = _using(using)
    depth = _depth(db)
    completed = _completed(db, window_minutes)
    lag: dict[str, float] = {}
    for queue, (count, waited) in _available(db).items():
        depth.setdefault(queue, {})[JobState.AVAILABLE] = count
        lag[queue] = waited
    paused = {q.queue: q for q in QueueState.objects.using(db).all()}
    dead = _dead_letters(db)
    names = sorted(
        set(awa_settings().queues) | set(depth) | set(completed) | set(paused) | set(dead)
    )
    return [
        replace(
            _stats(name, depth, completed, lag, paused.get(name), window_minutes),
            dead_letters=dead.get(name, 0),
        )
        for name in names
    ]


def _dead_letters(db: str) -> dict[str, int]:
    """Dead letters per queue (awa_dead_letters_queue_idx: an index-only count)."""
    rows = DeadLetter.objects.using(db).values("queue").annotate(n=Count("*")).order_by()
    return {r["queue"]: r["n"] for r in rows}


def _stats(
    name: str,
    depth: dict[str, dict[str, int]],
    completed: dict[str, tuple[int, int]],
    lag: dict[str, float],
    state: QueueState | None,
    window_minutes: int,
) -> QueueStats:
    last_minute, in_window = completed.get(name, (0, 0))
    concurrency, rate = _overrides(state)
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
        concurrency_override=concurrency,
        rate_override=rate,
        limits=limits_text(awa_settings().queue(name), concurrency, rate),
    )


def _overrides(state: QueueState | None) -> tuple[int | None, RateLimit | None]:
    if state is None:
        return None, None
    rate = None
    if state.rate_override is not None and state.burst_override is not None:
        rate = RateLimit(state.rate_override, state.burst_override)
    return state.concurrency_override, rate


def limits_text(queue: QueueConfig, concurrency: int | None, rate: RateLimit | None) -> str:
    """ "concurrency 20, rate 50/s burst 10 (global)"; overrides marked as such."""
    parts = [
        f"concurrency {concurrency} (override)"
        if concurrency
        else f"concurrency {queue.concurrency}"
    ]
    if rate is not None:
        parts.append(f"rate {rate} ({queue.rate_scope}, override)")
    elif queue.rate_limit is not None:
        parts.append(f"rate {queue.rate_limit} ({queue.rate_scope})")
    return ", ".join(parts)


def _depth(db: str) -> dict[str, dict[str, int]]:
    """The depth of every depth state but `available` (see `_available`)."""
    # order_by() drops Meta.ordering, which would otherwise join the GROUP BY.
    rows = (
        Job.objects.using(db)
        .filter(state__in=INDEXED_DEPTH_STATES)
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


def _available(db: str) -> dict[str, tuple[int, float]]:
    """Each queue's `available` jobs: how many, and how long the oldest has waited (s)."""
    # run_at is when an available job became due, so now() - min(run_at) is how long the
    # oldest one has waited for a worker (a scheduled job does not count until due).
    age = ExpressionWrapper(Now() - Min("run_at"), output_field=DurationField())
    rows = (
        Job.objects.using(db)
        .filter(state=JobState.AVAILABLE)
        .values("queue")
        .annotate(age=age, n=Count("*"))
        .order_by()
    )
    return {r["queue"]: (r["n"], max(r["age"].total_seconds(), 0.0)) for r in rows}


def live_workers(
    within_seconds: float | None = None, *, using: str | None = None
) -> list[LiveWorker]:
    """Worker processes seen within `within_seconds` (default: the heartbeat staleness),
    leader first, then by host and pid."""
    if within_seconds is None:
        within_seconds = awa_settings().heartbeat_staleness
    since = Now() - dt.timedelta(seconds=within_seconds)
    workers = WorkerInstance.objects.using(_using(using)).filter(last_seen_at__gte=since)
    return [_live_worker(w) for w in workers.order_by("-leader", "hostname", "pid")]


def _live_worker(row: WorkerInstance) -> LiveWorker:
    return LiveWorker(**{f.name: getattr(row, f.name) for f in fields(LiveWorker)})


def queues_with_state(limit: int = 200, *, using: str | None = None) -> list[str]:
    """Names of queues that were ever paused (a row of the small queue-state table)."""
    names = QueueState.objects.using(_using(using)).values_list("queue", flat=True)
    return list(names.order_by("queue")[:limit])


def unhandled_kinds(*, using: str | None = None) -> dict[str, int]:
    """Kinds with jobs waiting to run (`WAITING_STATES`: a keyed kind's line behind its
    key's slots and children waiting for parents too) that no live worker has a handler
    for, with how many jobs wait: what waits for new workers during a rolling
    deploy, or a kind whose worker is missing. Empty while no worker is live (nothing to
    compare with). Cost: one pass over the waiting jobs, like the queue depths, plus the
    worker rows."""
    workers = live_workers(using=using)
    if not workers:
        return {}
    handled = {kind for worker in workers for kind in (worker.kinds or [])}
    serves_tasks = any(worker.serves_tasks for worker in workers)
    waiting = (
        Job.objects.using(_using(using))
        .filter(state__in=WAITING_STATES)
        .values("kind")
        .annotate(n=Count("*"))
        .order_by()
    )
    return {
        row["kind"]: row["n"]
        for row in waiting
        if row["kind"] not in handled and not (serves_tasks and "." in row["kind"])
    }
