"""Example jobs of the demo shop: one succeeds (and is unique: a duplicate is refused), one
retries then succeeds, one fails for good, one parks until an outside system (the carrier)
calls back, a stock report runs on a cron schedule, and an atomic handler writes an invoice
row that commits with its completion, which enqueues the invoice e-mail (hooks.py)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import awa_django
from awa_django import JobContext


@dataclass
class SendReceipt:
    order_id: int
    email: str = "customer@example.com"


@dataclass
class SyncInventory:
    sku: str
    fail_times: int = 1


@dataclass
class ChargeCard:
    order_id: int
    amount_cents: int


@dataclass
class RequestShippingLabel:
    order_id: int
    carrier: str = "parcelco"


@dataclass
class CreateInvoice:
    order_id: int
    amount_cents: int


@dataclass
class EmailInvoice:
    order_id: int


@dataclass
class StockReport:
    warehouse: str = "main"


# The demo's schedule: every 2 seconds, so `make demo` sees it fire. A real one would read
# periodic("stock-report", "0 6 * * *", StockReport(), timezone="Europe/Berlin"). Declared
# only where AWA_DEMO_SCHEDULES=1 (the demo's own worker), so no other worker or test
# fires it; the demo removes the schedule's row when it ends.
DEMO_SCHEDULE = "shop-stock-report"
if os.environ.get("AWA_DEMO_SCHEDULES") == "1":
    awa_django.periodic(DEMO_SCHEDULE, "*/2 * * * * *", StockReport())


# One receipt per order and address: a second enqueue while one is queued, running or
# sent raises UniqueConflict (the demo shows it).
@awa_django.job(SendReceipt, queue="email", max_attempts=5, unique=awa_django.UniqueOpts())
def send_receipt(job: JobContext[SendReceipt]) -> None:
    job.set_progress(100, f"receipt for order {job.args.order_id} sent to {job.args.email}")


@awa_django.job(SyncInventory, max_attempts=3)
async def sync_inventory(job: JobContext[SyncInventory]) -> None:
    await asyncio.sleep(0)
    if job.attempt <= job.args.fail_times:
        # Any exception means "retry with backoff" until max_attempts is used up.
        raise ConnectionError(f"inventory service timed out for {job.args.sku}")


@awa_django.job(ChargeCard, max_attempts=2)
def charge_card(job: JobContext[ChargeCard]) -> None:
    if job.args.amount_cents <= 0:
        raise awa_django.TerminalError(f"refusing to charge {job.args.amount_cents} cents")


@awa_django.job(StockReport, queue="email")
def stock_report(job: JobContext[StockReport]) -> None:
    job.result = {"warehouse": job.args.warehouse, "fired_at": job.metadata.get("cron_fire_time")}


@awa_django.job(RequestShippingLabel)
def request_shipping_label(job: JobContext[RequestShippingLabel]) -> awa_django.WaitForCallback:
    # A real handler would send token.id to the carrier's API here; the carrier later
    # POSTs a signed request to /awa/callbacks/<token.id>/complete. The job is parked in
    # `waiting_external` meanwhile and holds no worker slot.
    token = job.register_callback(timeout=600)
    job.update_metadata({"carrier": job.args.carrier, "callback_id": str(token.id)})
    return awa_django.WaitForCallback(token)


# atomic=True: the invoice row and the job's completion commit together. Were this attempt
# rescued and run again elsewhere (a paused worker), only one attempt's row would survive,
# and the EmailInvoice follow-up (hooks.py) exists iff the completion committed.
@awa_django.job(CreateInvoice, atomic=True)
def create_invoice(job: JobContext[CreateInvoice]) -> None:
    from .models import Invoice

    Invoice.objects.create(order_id=job.args.order_id, amount_cents=job.args.amount_cents)


@awa_django.job(EmailInvoice, queue="email")
def email_invoice(job: JobContext[EmailInvoice]) -> None:
    job.set_progress(100, f"invoice for order {job.args.order_id} e-mailed")
