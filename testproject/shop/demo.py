"""The pieces of `manage.py awa_demo`: a worker subprocess, the demo's jobs and their
expected outcomes, the signed carrier callback, and the report.

Runs against whatever database Django is configured with; the worker subprocess gets the
same one through DATABASE_URL, so it also works inside a test run's test database.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection, transaction

import awa_django
from awa_django import JobSnapshot
from awa_django.models import Job

from . import hooks
from .jobs import (
    DEMO_SCHEDULE,
    ChargeCard,
    CreateInvoice,
    RequestShippingLabel,
    SendReceipt,
    SyncInventory,
)


@dataclass(frozen=True)
class Expected:
    state: str
    attempt: int


INVOICE_ORDER = 1003  # the order whose invoice the atomic handler writes

# What each demo job must end as; the demo fails loudly when the queue disagrees.
PLAN: list[tuple[Any, Expected]] = [
    (SendReceipt(order_id=1001), Expected("completed", 1)),
    (SyncInventory(sku="SKU-42", fail_times=1), Expected("completed", 2)),
    (ChargeCard(order_id=1002, amount_cents=0), Expected("failed", 1)),
    (RequestShippingLabel(order_id=1001), Expected("completed", 1)),
    (CreateInvoice(order_id=INVOICE_ORDER, amount_cents=4200), Expected("completed", 1)),
]


def database_url(settings_dict: dict[str, Any]) -> str:
    """A DATABASE_URL naming the database Django is connected to (the test database
    inside a test run), for the worker subprocess."""
    user = quote(settings_dict.get("USER") or "", safe="")
    password = settings_dict.get("PASSWORD") or ""
    credentials = f"{user}:{quote(password, safe='')}" if password else user
    host = settings_dict.get("HOST") or ""
    name = quote(settings_dict["NAME"], safe="")
    if host.startswith("/"):  # a socket directory goes into the query string
        return f"postgres://{credentials}@/{name}?host={quote(host, safe='/')}"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"postgres://{credentials}@{host}{port}/{name}"


class WorkerProcess:
    """`manage.py awa_worker` as a subprocess whose output is collected line by line."""

    def __init__(self, flags: Sequence[str]) -> None:
        # AWA_DEMO_SCHEDULES: this worker declares the demo's cron schedule (shop/jobs.py).
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "AWA_DEMO_SCHEDULES": "1"}
        env["DATABASE_URL"] = database_url(connection.settings_dict)
        manage = Path(settings.BASE_DIR) / "manage.py"
        self.command = [sys.executable, str(manage), "awa_worker", *flags]
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=manage.parent,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def alive(self) -> bool:
        return self.process.poll() is None

    def hook_lines(self) -> list[str]:
        return [line[len(hooks.PREFIX) :].strip() for line in self.lines if hooks.PREFIX in line]

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (drain and exit); SIGKILL if it has not exited within `timeout`."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(5)
        return code


def enqueue_plan() -> list[tuple[JobSnapshot, Expected]]:
    """Enqueue every demo job in one transaction: all of them exist, or none."""
    with transaction.atomic():
        return [(awa_django.enqueue(args, tags=["demo"]), want) for args, want in PLAN]


def enqueue_duplicate_receipt() -> str:
    """Enqueue the plan's receipt again: SendReceipt is unique, so it is refused."""
    try:
        row = awa_django.enqueue(PLAN[0][0], tags=["demo"])
    except awa_django.UniqueConflict as conflict:
        return f"duplicate {PLAN[0][0]} refused: job {conflict.job_id} holds its unique key"
    return f"duplicate {PLAN[0][0]} was NOT refused (job #{row.id})"


def wait_for_schedule_fire(timeout: float) -> str:
    """Wait for the demo schedule's first fire to complete; the line to print."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fired = Job.objects.filter(metadata__cron_name=DEMO_SCHEDULE, state="completed")
        if job := fired.order_by("id").first():
            when = job.metadata.get("cron_fire_time")
            return f"schedule {DEMO_SCHEDULE} (every 2 s) fired at {when}: job #{job.id}"
        time.sleep(0.1)
    return f"schedule {DEMO_SCHEDULE} did NOT fire within {timeout:.0f} s"


def wait_for_invoice_follow_up(timeout: float) -> str:
    """Wait for the invoice e-mail that the invoice's completion enqueued; the line to
    print, with the invoice rows (one: written in the completion's transaction)."""
    from .models import Invoice

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        emails = Job.objects.filter(kind="email_invoice", args__order_id=INVOICE_ORDER)
        if (email := emails.order_by("id").first()) and email.state == "completed":
            rows = Invoice.objects.filter(order_id=INVOICE_ORDER).count()
            return (
                f"atomic create_invoice wrote {rows} invoice row for order {INVOICE_ORDER} "
                f"with its completion, which enqueued email_invoice #{email.id} (completed, "
                f"{emails.count()} in all)"
            )
        time.sleep(0.1)
    return f"the invoice e-mail of order {INVOICE_ORDER} did NOT complete within {timeout:.0f} s"


def forget_previous_run() -> int:
    """Delete an earlier demo run's jobs and invoice from this database: its completed
    receipt would still hold the unique key (completed jobs keep it for their 24 h of
    retention), so a second `make demo` would be refused. Returns how many jobs went."""
    from .models import Invoice

    Invoice.objects.filter(order_id=INVOICE_ORDER).delete()
    earlier = (
        Job.objects.filter(tags__contains=["demo"])
        | Job.objects.filter(kind="email_invoice", args__order_id=INVOICE_ORDER)
        | Job.objects.filter(metadata__cron_name=DEMO_SCHEDULE)
    )
    deleted, _ = earlier.delete()
    return deleted


def remove_demo_schedule() -> None:
    """The demo's schedule row outlives its worker: remove it, or every later worker's
    leader would keep firing it (a sync never deletes; decision 013)."""
    with contextlib.suppress(awa_django.ScheduleNotFound):
        awa_django.Client().remove_schedule(DEMO_SCHEDULE)


def complete_shipping_callback(row: JobSnapshot) -> tuple[str, int, str]:
    """Play the carrier: POST a signed completion for the parked job's callback.
    Returns the path, the HTTP status and the response body."""
    from django.test import Client as HttpClient

    from awa_django.web.signing import callback_url, sign_callback_request

    path = callback_url(str(row.callback_id), "complete")
    body = json.dumps({"payload": {"tracking_number": f"PC{row.args['order_id']}"}}).encode()
    headers = sign_callback_request("POST", path, body)
    response = HttpClient().post(path, body, content_type="application/json", headers=headers)
    return path, response.status_code, response.content.decode(errors="replace")


@dataclass
class Run:
    """The demo's jobs while it waits for them to finish."""

    jobs: list[tuple[JobSnapshot, Expected]]
    answered: set[uuid.UUID | None] = field(default_factory=set)

    def refresh(self) -> None:
        self.jobs = [(awa_django.Client().get_job(row.id), want) for row, want in self.jobs]

    def done(self) -> bool:
        return all(row.is_terminal for row, _ in self.jobs)

    def answer_callbacks(self, say: Callable[[str], None]) -> None:
        for row, _ in self.jobs:
            if row.state == "waiting_external" and row.callback_id not in self.answered:
                self.answered.add(row.callback_id)
                path, status, body = complete_shipping_callback(row)
                say(f"carrier callback: POST {path} -> HTTP {status} {body}")

    def mismatches(self) -> list[str]:
        return [
            f"{row.kind} #{row.id}: {row.state} after {row.attempt} attempt(s), "
            f"expected {want.state} after {want.attempt}"
            for row, want in self.jobs
            if (row.state, row.attempt) != (want.state, want.attempt)
        ]


def wait_until_done(
    run: Run, worker: WorkerProcess, timeout: float, say: Callable[[str], None]
) -> bool:
    """Poll until every job is terminal; False on timeout or if the worker died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh()
        run.answer_callbacks(say)
        if run.done():
            return True
        if not worker.alive():
            return False
        time.sleep(0.1)
    return False


# Jobs the demo did not enqueue itself but ran: the invoice e-mail that create_invoice's
# completion enqueued, and the cron schedule's fires.
FOLLOW_UP = Expected("completed", 1)


@dataclass(frozen=True)
class Report:
    """Every job the demo ran, and what the id column would otherwise leave unexplained."""

    ran: list[tuple[JobSnapshot, Expected]]
    not_run: list[JobSnapshot]  # fires enqueued too late for the stopped worker
    unused_ids: list[int]  # numbers no job holds: the refused duplicate's insert used them


def report(run: Run) -> Report:
    """The plan's jobs, plus the follow-up e-mail and the cron fires enqueued since the plan;
    the ids in between that no job holds (the refused duplicate receipt took one: an
    INSERT that fails still uses up its sequence number)."""
    first = min(row.id for row, _ in run.jobs)
    client = awa_django.Client()
    later = Job.objects.filter(id__gt=first).exclude(id__in=[r.id for r, _ in run.jobs])
    extra = [
        client.get_job(job_id)
        for job_id in later.filter(kind="email_invoice", args__order_id=INVOICE_ORDER)
        .union(later.filter(metadata__cron_name=DEMO_SCHEDULE))
        .values_list("id", flat=True)
    ]
    ran = run.jobs + [(row, FOLLOW_UP) for row in extra if row.attempt]
    ran.sort(key=lambda pair: pair[0].id)
    held = {row.id for row, _ in run.jobs} | {row.id for row in extra}
    last = max(held)
    unused = [
        n for n in range(first, last) if n not in held and not Job.objects.filter(id=n).exists()
    ]
    return Report(ran, sorted((r for r in extra if not r.attempt), key=lambda r: r.id), unused)


def report_notes(found: Report) -> list[str]:
    notes = []
    if found.unused_ids:
        ids = ", ".join(f"#{n}" for n in found.unused_ids)
        notes.append(
            f"{ids}: no job; the refused duplicate receipt's INSERT used the number "
            "(PostgreSQL never hands a sequence value out twice, even for a failed insert)"
        )
    if found.not_run:
        ids = ", ".join(f"{r.kind} #{r.id}" for r in found.not_run)
        notes.append(f"{ids}: fired by the schedule after its job ran, not run before the stop")
    return notes


def table(rows: Sequence[JobSnapshot], wanted: Sequence[Expected]) -> str:
    header = ("id", "kind", "queue", "state", "attempts", "as expected", "errors")
    lines = [header]
    for row, want in zip(rows, wanted, strict=True):
        ok = "yes" if (row.state, row.attempt) == (want.state, want.attempt) else "NO"
        lines.append(
            (
                str(row.id),
                row.kind,
                row.queue,
                row.state,
                f"{row.attempt}/{row.max_attempts}",
                ok,
                errors_cell(row),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        out.append("  " + "  ".join([*cells, line[-1]]))
    out.insert(1, "  " + "  ".join("-" * w for w in [*widths, len(header[-1])]))
    return "\n".join(out)


def errors_cell(row: JobSnapshot) -> str:
    if not row.errors:
        return "-"
    last = hooks.first_line(str(row.errors[-1].get("error", "")))
    last = last if len(last) <= 70 else last[:67] + "..."
    return f"{len(row.errors)}: {last}"
