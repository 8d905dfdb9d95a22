"""Example jobs of the demo shop: one succeeds, one retries then succeeds, one fails."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import awa_django
from awa_django import Job


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


@awa_django.job(SendReceipt, queue="email", max_attempts=5)
def send_receipt(job: Job[SendReceipt]) -> None:
    job.set_progress(100, f"receipt for order {job.args.order_id} sent to {job.args.email}")


@awa_django.job(SyncInventory, max_attempts=3)
async def sync_inventory(job: Job[SyncInventory]) -> None:
    await asyncio.sleep(0)
    if job.attempt <= job.args.fail_times:
        raise ConnectionError(f"inventory service timed out for {job.args.sku}")


@awa_django.job(ChargeCard, max_attempts=2)
def charge_card(job: Job[ChargeCard]) -> None:
    if job.args.amount_cents <= 0:
        raise awa_django.TerminalError(f"refusing to charge {job.args.amount_cents} cents")
