"""`python manage.py awa_status [--json]`: per-queue figures and live workers, for people
and scripts (the same figures as the admin dashboard)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import psycopg
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, ProgrammingError, connections

from awa_django.client import DEPTH_STATES, Client, LiveWorker, QueueStats, Thresholds, breaches
from awa_django.conf import awa_settings
from awa_django.display import format_duration
from awa_django.exceptions import InvalidThreshold
from awa_django.snapshot import KeyFigures

SHORT_NAMES = {"waiting_external": "waiting", "waiting_slot": "for_slot"}
BUSIEST_KEYS = 10


# A week: longer than any rollup retention worth reading here, and far inside an interval's range.
MAX_WINDOW_MINUTES = 7 * 24 * 60


class Command(BaseCommand):
    help = (
        "Show depth by state, dead letters, throughput, lag and paused flag per queue, "
        "and live workers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
        parser.add_argument(
            "--window", type=int, default=5, help="throughput window in minutes (default 5)"
        )
        parser.add_argument(
            "--database",
            default=None,
            help='database alias (default: AWA["READ_DATABASE"], else AWA["DATABASE"])',
        )
        _add_check_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        # Read-only figures: a replica serves them as well as the primary (decision 020).
        settings = awa_settings()
        using = options["database"] or settings.read_database or settings.database
        if using not in connections.databases:
            raise CommandError(f"unknown database alias {using!r}; see DATABASES in settings")
        if not 1 <= options["window"] <= MAX_WINDOW_MINUTES:
            raise CommandError(f"--window must be 1 to {MAX_WINDOW_MINUTES} minutes")
        if options["check"]:
            self._check(using, options)
            return
        stats, workers, unhandled, busiest = _collect(options["window"], using)
        if options["json"]:
            document = _document(stats, workers, options["window"])
            keys = [dataclasses.asdict(k) for k in busiest]
            document = {**document, "unhandled_kinds": unhandled, "busiest_keys": keys}
            self.stdout.write(json.dumps(document, indent=2))
        else:
            self.stdout.write(_table(stats, options["window"]))
            self.stdout.write(_unhandled_text(unhandled))
            self.stdout.write(_keys_text(busiest))
            self.stdout.write(_workers_text(workers))

    def _check(self, using: str, options: dict[str, Any]) -> None:
        """One line per breach on stdout and exit status 1; "OK" and 0 when none."""
        try:
            limits = Thresholds(
                options["max_lag"], options["max_failure_rate"], options["min_jobs"]
            )
        except InvalidThreshold as exc:
            raise CommandError(str(exc)) from exc
        if limits.max_lag_seconds is None and limits.max_failure_rate is None:
            raise CommandError("--check needs --max-lag and/or --max-failure-rate")
        stats, _, _, _ = _collect(options["window"], using)
        found = breaches(stats, Client(using).queue_outcomes(options["window"]), limits)
        for breach in found:
            self.stdout.write(f"BREACH {breach}")
        if found:
            raise SystemExit(EXIT_BREACH)
        self.stdout.write(f"OK: {len(stats)} queues within thresholds")


EXIT_BREACH = 1


def _add_check_arguments(parser: CommandParser) -> None:
    """`--check` for cron-style monitoring (docs/operations.md)."""
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 with one line per breach when a queue passes a threshold below",
    )
    parser.add_argument("--max-lag", type=float, help="seconds the oldest available job may wait")
    parser.add_argument(
        "--max-failure-rate",
        type=float,
        help="failed / (completed + failed) over --window, 0..1",
    )
    parser.add_argument(
        "--min-jobs",
        type=int,
        default=1,
        help="judge a failure rate only from this many finalized jobs (default 1)",
    )


def _collect(
    window: int, using: str
) -> tuple[list[QueueStats], list[LiveWorker], dict[str, int], list[KeyFigures]]:
    try:
        client = Client(using)
        return (
            client.queue_stats(window),
            client.live_workers(),
            client.unhandled_kinds(),
            client.busiest_keys(BUSIEST_KEYS),
        )
    except ProgrammingError as exc:
        if isinstance(exc.__cause__, psycopg.errors.UndefinedTable):
            raise CommandError(
                f"awa-django's tables are missing in database {using!r}: "
                "run `python manage.py migrate` first."
            ) from exc
        raise CommandError(f"cannot read queue figures: {exc}") from exc
    except DatabaseError as exc:
        raise CommandError(f"cannot read queue figures from database {using!r}: {exc}") from exc


def _document(stats: list[QueueStats], workers: list[LiveWorker], window: int) -> dict[str, Any]:
    return {
        "window_minutes": window,
        "queues": [q.as_dict() for q in stats],
        "workers": [
            {
                "worker_id": w.worker_id,
                "hostname": w.hostname,
                "pid": w.pid,
                "queues": w.queues,
                "started_at": w.started_at.isoformat(),
                "last_seen_at": w.last_seen_at.isoformat(),
                "leader": w.leader,
                "shutting_down": w.shutting_down,
                "completed_count": w.completed_count,
                "kinds": w.kinds,
                "hooks_dropped": w.hooks_dropped,
            }
            for w in workers
        ],
    }


def _table(stats: list[QueueStats], window: int) -> str:
    header = [
        "queue",
        *(SHORT_NAMES.get(s, s) for s in DEPTH_STATES),
        "dead",
        "done/1m",
        f"done/{window}m",
        "lag",
        "status",
        "limits",
    ]
    rows = [header] + [
        [
            q.queue,
            *(str(q.depth.get(s, 0)) for s in DEPTH_STATES),
            str(q.dead_letters),
            str(q.completed_last_minute),
            str(q.completed_in_window),
            format_duration(q.lag_seconds),
            f"paused by {q.paused_by}" if q.paused and q.paused_by else _status(q),
            q.limits,
        ]
        for q in stats
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    text = [name in TEXT_COLUMNS for name in header]
    lines = ["  ".join(map(_cell, r, widths, text)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _status(q: QueueStats) -> str:
    return "paused" if q.paused else "active"


# Columns of words read left-aligned, under their header; figures right-aligned. Named, not
# numbered, so a new column cannot misalign them.
TEXT_COLUMNS = frozenset({"queue", "status", "limits"})


def _cell(value: str, width: int, text: bool) -> str:
    return value.ljust(width) if text else value.rjust(width)


def _unhandled_text(unhandled: dict[str, int]) -> str:
    """Kinds with waiting jobs no live worker has a handler for (decision 011)."""
    if not unhandled:
        return ""
    lines = ["\nKinds no live worker handles (waiting jobs):"]
    lines += [f"  {kind}: {count}" for kind, count in sorted(unhandled.items())]
    return "\n".join(lines)


def _keys_text(busiest: list[KeyFigures]) -> str:
    """The busiest concurrency keys (decision 045); nothing when no key is in use."""
    if not busiest:
        return ""
    lines = ["\nBusiest concurrency keys (in flight, waiting for a slot):"]
    lines += [f"  {k.key}: {k.in_flight} in flight, {k.waiting} waiting" for k in busiest]
    return "\n".join(lines)


def _workers_text(workers: list[LiveWorker]) -> str:
    if not workers:
        return "\nNo live workers (none reported in recently)."
    lines = [f"\n{len(workers)} live worker{'s' if len(workers) != 1 else ''}:"]
    for w in workers:
        role = " leader" if w.leader else ""
        stopping = " shutting down" if w.shutting_down else ""
        seen = f"{w.last_seen_at:%H:%M:%S}"
        lines.append(f"  {w.hostname}:{w.pid}{role}{stopping}  {w.worker_id}  last seen {seen}")
    return "\n".join(lines)
