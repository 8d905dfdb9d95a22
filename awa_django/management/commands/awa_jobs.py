"""`python manage.py awa_jobs VERB [filters]`: bulk operations on jobs through the Client,
with a progress bar on stderr, a dry run, a confirmation and `--resume ID`
(docs/bulk-operations.md).

    manage.py awa_jobs retry-failed --queue email --dry-run
    manage.py awa_jobs cancel --kind import_row --state available --state scheduled --yes
    manage.py awa_jobs --max-per-second 2000 retry-failed --kind import_row --yes
    manage.py awa_jobs --busy-fraction 1 discard-failed --queue email --yes   # no pauses
    manage.py awa_jobs --resume 42
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from django.db import connections
from django.utils import timezone

from awa_django.bulk import BulkAction, BulkProgress, JobFilter
from awa_django.client import Client
from awa_django.client.bulk import DEFAULT_BUSY_FRACTION, DEFAULT_CHUNK
from awa_django.exceptions import AwaError

# verb → (action, which filter options it takes: "queue", "kind-queue" or "all", help)
VERBS: dict[str, tuple[BulkAction, str, str]] = {
    "drain": (BulkAction.CANCEL, "queue", "cancel every waiting job of QUEUE (running ones go on)"),
    "retry-failed": (BulkAction.RETRY, "kind-queue", "retry the failed jobs that match"),
    "discard-failed": (BulkAction.DISCARD, "kind-queue", "delete the failed jobs that match"),
    "cancel": (BulkAction.CANCEL, "all", "cancel the jobs that match, running ones included"),
    "retry": (
        BulkAction.RETRY,
        "all",
        "retry the failed, cancelled, retryable and waiting_external jobs that match",
    ),
    "set-priority": (
        BulkAction.SET_PRIORITY,
        "all",
        "give the waiting jobs that match a new PRIORITY",
    ),
    "move-queue": (
        BulkAction.MOVE_QUEUE,
        "all",
        "move the waiting jobs that match to TARGET_QUEUE",
    ),
}
DRAIN_STATES = tuple(s for s in BulkAction.CANCEL.states if s != "running")


def when(value: str) -> dt.datetime:
    """An ISO 8601 date-time; without an offset it is read in the current time zone."""
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 date-time, got {value!r}") from None
    return moment if moment.tzinfo else timezone.make_aware(moment)


class Command(BaseCommand):
    help = "Cancel, retry, re-prioritise, move or discard every job matching a filter."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--resume", type=int, metavar="ID", help="finish operation ID")
        parser.add_argument("--show", type=int, metavar="ID", help="print operation ID")
        parser.add_argument("--database", default=None, help="database alias (default: AWA)")
        parser.add_argument(
            "--max-per-second", type=float, metavar="N", help="pace: at most N jobs a second"
        )
        parser.add_argument(
            "--busy-fraction",
            type=float,
            metavar="F",
            default=DEFAULT_BUSY_FRACTION,
            help="share of the time spent in chunks, 0 < F <= 1 (default %(default)s; 1: no"
            " pause between chunks)",
        )
        verbs = parser.add_subparsers(dest="verb", required=False, metavar="VERB")
        for verb, (_, scope, text) in VERBS.items():
            sub = verbs.add_parser(verb, help=text, description=text[0].upper() + text[1:] + ".")
            add_verb_arguments(sub, verb, scope)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["database"] is not None and options["database"] not in connections:
            raise CommandError(f"no database {options['database']!r} in DATABASES")
        client = Client(options["database"])
        try:
            if options["show"] is not None:
                self.stdout.write(describe(client.bulk_operation(options["show"])))
            elif options["resume"] is not None:
                progress = client.resume_bulk(
                    options["resume"],
                    on_progress=self._bar(),
                    max_per_second=options["max_per_second"],
                    busy_fraction=options["busy_fraction"],
                )
                self._finish(progress)
            elif options["verb"]:
                self._run(client, options)
            else:
                self.stdout.write("\n".join(map(describe, client.bulk_operations(20))) or "none")
        except AwaError as exc:
            raise CommandError(str(exc)) from exc

    def _run(self, client: Client, options: dict[str, Any]) -> None:
        action = VERBS[options["verb"]][0]
        where = job_filter(options)
        run = {
            "chunk_size": options["chunk_size"],
            "max_per_second": options["max_per_second"],
            "busy_fraction": options["busy_fraction"],
        }
        # The dry run and the real run check the same filter and the same arguments.
        total = client.bulk_dry_run(action, where, **verb_arguments(options), **run)
        noun = f"{total:,} job{'' if total == 1 else 's'}"
        if options["dry_run"]:
            self.stdout.write(f"{options['verb']} would look at {noun} (dry run)")
            return
        if not options["yes"] and not self._confirm(f"{options['verb']} {noun}?"):
            raise CommandError("aborted; nothing changed")
        progress = start(
            client, options, where, created_by="awa_jobs", on_progress=self._bar(), **run
        )
        self._finish(progress)

    def _confirm(self, question: str) -> bool:
        if not sys.stdin.isatty():
            raise CommandError(f"{question} Pass --yes to confirm without a terminal.")
        self.stderr.write(f"{question} [y/N] ", ending="")
        return input().strip().lower() in ("y", "yes")

    def _bar(self) -> ProgressBar:
        return ProgressBar(self.stderr)

    def _finish(self, progress: BulkProgress) -> None:
        self.stdout.write(describe(progress))


def add_verb_arguments(sub: CommandParser, verb: str, scope: str) -> None:
    if verb == "drain":
        sub.add_argument("queue_name", metavar="QUEUE", help="the queue to drain")
    if verb == "set-priority":
        sub.add_argument("priority", type=int, help="lower runs first: 1 urgent .. 4 batch")
    if verb == "move-queue":
        sub.add_argument("target_queue", metavar="TARGET_QUEUE", help="the queue to move to")
    if scope != "queue":
        sub.add_argument("--queue", help="only jobs of this queue")
        sub.add_argument("--kind", help="only jobs of this kind")
    if scope == "all":
        sub.add_argument(
            "--state", action="append", default=[], help="only jobs in this state (repeatable)"
        )
        sub.add_argument(
            "--tag",
            action="append",
            default=[],
            help="only jobs with this tag (repeatable: with all of them)",
        )
        for bound, word in (("after", "at or after"), ("before", "before")):
            for moment in ("created", "finalized"):
                sub.add_argument(
                    f"--{moment}-{bound}",
                    type=when,
                    metavar="ISO",
                    help=f"only jobs {moment} {word} this ISO 8601 time",
                )
    sub.add_argument(
        "--dry-run", action="store_true", help="check everything and count, change nothing"
    )
    sub.add_argument("--yes", action="store_true", help="do not ask to confirm")
    sub.add_argument(
        "--chunk-size",
        type=int,
        default=DEFAULT_CHUNK,
        metavar="N",
        help="jobs per transaction, 1..10,000 (default %(default)s)",
    )


def job_filter(options: dict[str, Any]) -> JobFilter:
    if options["verb"] == "drain":
        return JobFilter(queue=options["queue_name"], states=DRAIN_STATES)
    states = tuple(options.get("state") or ()) or (
        ("failed",) if options["verb"].endswith("-failed") else ()
    )
    return JobFilter(
        queue=options.get("queue"),
        kind=options.get("kind"),
        states=states,
        tags=tuple(options.get("tag") or ()),
        created_after=options.get("created_after"),
        created_before=options.get("created_before"),
        finalized_after=options.get("finalized_after"),
        finalized_before=options.get("finalized_before"),
    )


def verb_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """The new priority of set-priority, the target queue of move-queue."""
    if options["verb"] == "set-priority":
        return {"priority": options["priority"]}
    if options["verb"] == "move-queue":
        return {"target_queue": options["target_queue"]}
    return {}


def start(client: Client, options: dict[str, Any], where: JobFilter, **run: Any) -> BulkProgress:
    verb = options["verb"]
    if verb in ("drain", "cancel"):
        return client.bulk_cancel(where, **run)
    if verb in ("retry-failed", "retry"):
        return client.bulk_retry(where, **run)
    if verb == "discard-failed":
        return client.discard_failed(kind=where.kind, queue=where.queue, **run)
    if verb == "set-priority":
        return client.bulk_set_priority(where, **verb_arguments(options), **run)
    return client.bulk_move_queue(where, queue=options["target_queue"], **run)


def describe(p: BulkProgress) -> str:
    extra = f" conflicts={p.conflicts:,}" if p.conflicts else ""
    return (
        f"operation {p.id}: {p.action.value} {p.state}; done={p.done:,} matched={p.matched:,} "
        f"skipped={p.skipped:,}{extra} (estimated {p.total_estimate:,} at start)"
        + ("" if p.finished else f"; resume with --resume {p.id}")
    )


class ProgressBar:
    """`[#########...........]  45%  12,000/27,000  3,100 rows/s` redrawn in place."""

    WIDTH = 30

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out
        self.began = time.monotonic()

    def __call__(self, p: BulkProgress) -> None:
        filled = int(p.fraction * self.WIDTH)
        rate = p.matched / max(time.monotonic() - self.began, 1e-6)
        self.out.write(
            f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {p.fraction:4.0%}  "
            f"{p.matched:,}/{p.total_estimate:,}  done {p.done:,}  {rate:,.0f} rows/s",
            ending="\n" if p.finished else "",
        )
        self.out.flush()
