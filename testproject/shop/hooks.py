"""Lifecycle hooks of the demo shop, registered in `ShopConfig.ready()`.

`log_event` prints one line per event of every shop job (the demo collects these lines
from the worker's output); `alert_ops` shows a typed hook: `event.args` is a `ChargeCard`.
Hooks are best-effort notifications; durable follow-up work belongs in a job, which
`on_completed_enqueue` writes in the completion's own transaction (`email_the_invoice`).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import awa_django
from awa_django import Completed, Event, Exhausted, Rescued, Retried, WaitingForCallback

from .jobs import (
    ChargeCard,
    CreateInvoice,
    EmailInvoice,
    RequestShippingLabel,
    SendReceipt,
    SyncInventory,
)

PREFIX = "[shop hook]"
# Lines of the events this process saw, for the demo command (list.append is thread-safe).
OBSERVED: list[str] = []


def describe(event: Event) -> str:
    detail = ""
    if isinstance(event, Completed):
        detail = f"after {event.duration.total_seconds():.3f} s"
    elif isinstance(event, Retried):
        detail = f"attempt {event.attempt} failed: {first_line(event.error)}"
    elif isinstance(event, Exhausted):
        detail = f"attempt {event.attempt}: {first_line(event.error)}"
    elif isinstance(event, WaitingForCallback):
        detail = f"callback {event.job.callback_id}"
    elif isinstance(event, Rescued | awa_django.Cancelled):
        detail = event.reason
    return f"{type(event).__name__:<18} {event.job.kind} #{event.job.id} {detail}".rstrip()


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def emit(line: str) -> None:
    # The timestamp lets the demo merge lines from the worker and the web process in order.
    stamped = f"{datetime.now(UTC).strftime('%H:%M:%S.%f')[:-3]} {line}"
    OBSERVED.append(stamped)
    # One write per line: hooks run on several threads, and print() writes the text and
    # its newline separately, which interleaves lines.
    sys.stdout.write(f"{PREFIX} {stamped}\n")
    sys.stdout.flush()


def log_event(event: Event) -> None:
    emit(describe(event))


def alert_ops(event: Event[ChargeCard]) -> None:
    order = event.args  # a ChargeCard: typed hooks get the decoded dataclass
    emit(f"ops alert: charging order {order.order_id} failed for good")


def email_the_invoice(args: CreateInvoice, done: Completed[CreateInvoice]) -> list[EmailInvoice]:
    """The follow-up of a committed invoice: inserted in the completion's transaction."""
    return [EmailInvoice(order_id=args.order_id)]


def register() -> None:
    for args_type in (
        SendReceipt,
        SyncInventory,
        ChargeCard,
        RequestShippingLabel,
        CreateInvoice,
        EmailInvoice,
    ):
        awa_django.on_event(args_type, log_event)
    awa_django.on_event(ChargeCard, alert_ops, events={Exhausted})
    awa_django.on_completed_enqueue(CreateInvoice, email_the_invoice)
