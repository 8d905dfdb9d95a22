"""Figures over time, read-only: the leader's per-minute rollups and per-kind outcomes of
recent jobs (decision 021). Plain ORM on `QueueRollup` and on the finalized partial index;
percentiles through PostgreSQL's `percentile_cont` as an ORM aggregate."""

from __future__ import annotations

import datetime as dt
from dataclasses import fields
from typing import Any

from django.db.models import Aggregate, CharField, Count, F, FloatField, Q, Value
from django.db.models.functions import Extract, Now

from awa_django.snapshot import KindFigures, RollupPoint
from awa_django.states import DeadLetterReason, JobState
from awa_django.storage.models import (
    INDEXED_DEPTH_STATES,
    TERMINAL,
    DeadLetter,
    Job,
    QueueRollup,
)


class Percentile(Aggregate):
    """`percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)`."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        if not 0 <= fraction <= 1:
            raise ValueError("fraction must be between 0 and 1")
        super().__init__(expression, fraction=float(fraction), **extra)


def queue_history(minutes: int, *, using: str) -> list[RollupPoint]:
    """Every queue's rollups of the last `minutes` minutes, oldest first."""
    since = Now() - dt.timedelta(minutes=minutes)
    rows = QueueRollup.objects.using(using).filter(minute__gte=since).order_by("minute", "queue")
    names = [f.name for f in fields(RollupPoint)]
    return [RollupPoint(*values) for values in rows.values_list(*names)]


def _finalized_since(minutes: int, using: str) -> Any:
    """Jobs finalized in the last `minutes` (served by awa_jobs_finalized_idx)."""
    since = Now() - dt.timedelta(minutes=minutes)
    return Job.objects.using(using).filter(state__in=TERMINAL, finalized_at__gte=since)


def dead_lettered_since(minutes: int, using: str, by: str) -> dict[str, int]:
    """{queue or kind: jobs dead-lettered in the last `minutes`} (awa_dead_letters_at_idx).

    A job of a dead-letter queue that fails for good leaves the jobs for the dead letters
    (docs/dead-letters.md): these are failures the finalized jobs no longer show. A manual
    move of a job that had already failed is no new failure."""
    since = Now() - dt.timedelta(minutes=minutes)
    rows = (
        DeadLetter.objects.using(using)
        .filter(dead_lettered_at__gte=since)
        .exclude(reason=DeadLetterReason.MANUAL)
        .values(by)
        .annotate(n=Count("*"))
        .order_by()
    )
    return {r[by]: r["n"] for r in rows}


def kind_figures(minutes: int, *, using: str) -> list[KindFigures]:
    """Per kind, the jobs that finalized in the last `minutes`, dead-lettered ones counted
    as failed: most jobs first. The p95 run time is over the finalized jobs."""
    run_seconds = Extract(F("finalized_at") - F("attempted_at"), "epoch")
    rows = (
        _finalized_since(minutes, using)
        .values("kind")
        .annotate(
            completed=Count("id", filter=Q(state=JobState.COMPLETED)),
            failed=Count("id", filter=Q(state=JobState.FAILED)),
            cancelled=Count("id", filter=Q(state=JobState.CANCELLED)),
            p95=Percentile(run_seconds, 0.95),
        )
        .order_by()
    )
    dead = dead_lettered_since(minutes, using, "kind")
    figures = [
        KindFigures(
            r["kind"],
            r["completed"],
            r["failed"] + dead.pop(r["kind"], 0),
            r["cancelled"],
            r["p95"],
        )
        for r in rows
    ]
    figures += [KindFigures(kind, 0, n, 0, None) for kind, n in dead.items()]
    return sorted(figures, key=lambda f: (-f.count, f.kind))


def queue_outcomes(minutes: int, *, using: str) -> dict[str, tuple[int, int]]:
    """{queue: (completed, failed)} over the jobs finalized in the last `minutes`, jobs
    dead-lettered in that time counted as failed."""
    rows = (
        _finalized_since(minutes, using)
        .values("queue")
        .annotate(
            completed=Count("id", filter=Q(state=JobState.COMPLETED)),
            failed=Count("id", filter=Q(state=JobState.FAILED)),
        )
        .order_by()
    )
    outcomes = {r["queue"]: (r["completed"], r["failed"]) for r in rows}
    for queue, n in dead_lettered_since(minutes, using, "queue").items():
        completed, failed = outcomes.get(queue, (0, 0))
        outcomes[queue] = (completed, failed + n)
    return outcomes


def state_counts(*, using: str) -> dict[str, int]:
    """Jobs per live state (every state but completed), the dashboard's depth summed over
    queues. One statement of two index-only counts (a single count over every live state
    would read the table): the partial state index for all but `available`, the dispatch
    index for those. PostgreSQL may run the two at once (Parallel Append)."""
    jobs = Job.objects.using(using).order_by()
    indexed = (
        jobs.filter(state__in=INDEXED_DEPTH_STATES).values_list("state").annotate(n=Count("*"))
    )
    available = (
        jobs.filter(state=JobState.AVAILABLE)
        .annotate(s=Value(JobState.AVAILABLE.value, output_field=CharField()))
        .values_list("s")
        .annotate(n=Count("*"))
    )
    # order_by() on the union too: it would take Meta.ordering (-id) from the first part.
    return {state: n for state, n in indexed.union(available, all=True).order_by() if n}
