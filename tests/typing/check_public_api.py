"""Usages of awa-django's public API that mypy must accept, and usages it must reject.

`test_public_api_types.py` runs mypy on this file: each line marked `# E: <code>` must
produce exactly that error, and every other line none. Never run; only type-checked.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import awa_django
from awa_django import Client, Event, Exhausted, JobContext, JobSnapshot, RetryAfter


@dataclass
class SendReceipt:
    order_id: int


@dataclass
class Refund:
    reason: str


# -- handlers: the handler's JobContext[T] must name the declared args type --------------------
@awa_django.job(SendReceipt, queue="email", max_attempts=5, priority=1)
def send_receipt(job: JobContext[SendReceipt]) -> None:
    order_id: int = job.args.order_id
    print(order_id, job.id, job.attempt)


@awa_django.job(Refund)
async def refund(job: JobContext[Refund]) -> RetryAfter | None:
    return RetryAfter(30) if job.args.reason else None


# mypy reports a decorator that does not fit its function on the decorator's line.
@awa_django.job(SendReceipt, kind="send_receipt_v2")  # E: arg-type
def wrong_args_type(job: JobContext[Refund]) -> None:
    pass


@awa_django.job(SendReceipt, kind="send_receipt_v3")
def misspelt_field(job: JobContext[SendReceipt]) -> None:
    print(job.args.order)  # E: attr-defined


@awa_django.job(SendReceipt, queue=5)  # E: arg-type
def wrong_queue_type(job: JobContext[SendReceipt]) -> None:
    pass


# -- hooks: event.args is the args type of on_event --------------------------------------------
def notify_ops(event: Event[SendReceipt]) -> None:
    order_id: int = event.args.order_id
    if isinstance(event, Exhausted):
        print(order_id, event.error, event.attempt)


def wrong_hook(event: Event[Refund]) -> None:
    pass


def any_event(event: Event) -> None:
    print(event.job.kind, event.args)


awa_django.on_event(SendReceipt, notify_ops, events={Exhausted})
awa_django.on_event(SendReceipt, wrong_hook)  # E: arg-type
awa_django.on_event_kind("legacy_import", any_event)
awa_django.on_any_event(any_event)


# -- enqueue: real keyword arguments -----------------------------------------------------------
def enqueue_usages(when: dt.datetime) -> None:
    row: JobSnapshot = awa_django.enqueue(
        SendReceipt(order_id=1),
        queue="email",
        priority=1,
        run_at=when,
        max_attempts=3,
        tags=["vip"],
        metadata={"trace": "abc"},
        using="default",
    )
    ids: list[int] = awa_django.enqueue_many([{"n": 1}], kind="legacy_import", queue="bulk")
    print(row.id, ids)
    awa_django.enqueue(SendReceipt(order_id=1), prority=1)  # E: call-arg
    awa_django.enqueue(SendReceipt(order_id=1), priority="1")  # E: arg-type
    awa_django.enqueue(SendReceipt(order_id=1), run_at="tomorrow")  # E: arg-type
    # enqueue_many is overloaded on on_conflict: a bad option matches no overload.
    awa_django.enqueue_many([SendReceipt(order_id=1)], metadata=["x"])  # E: call-overload
    print(awa_django.enqueue(SendReceipt(order_id=1)).nope)  # E: attr-defined
    # Unique jobs: UniqueOpts, False (opt out of the @job default) or None.
    awa_django.enqueue(SendReceipt(order_id=1), unique=awa_django.UniqueOpts(by_period=60))
    awa_django.enqueue(SendReceipt(order_id=1), unique=False)
    awa_django.enqueue(SendReceipt(order_id=1), unique=True)  # E: arg-type
    skipped: awa_django.EnqueueManyResult = awa_django.enqueue_many(
        [SendReceipt(order_id=1)], unique=awa_django.UniqueOpts(), on_conflict="skip"
    )
    raised: list[int] = awa_django.enqueue_many([SendReceipt(order_id=1)], on_conflict="raise")
    many = [SendReceipt(order_id=1)]
    wrong: list[int] = awa_django.enqueue_many(many, on_conflict="skip")  # E: assignment
    print(skipped.skipped, raised, wrong)


async def aenqueue_usages() -> None:
    row: JobSnapshot = await awa_django.aenqueue(SendReceipt(order_id=1), queue="email")
    ids: list[int] = await awa_django.aenqueue_many([SendReceipt(order_id=2)], tags=["a"])
    print(row, ids)
    await awa_django.aenqueue_many([SendReceipt(order_id=1)], max_attempts="3")  # E: call-overload


# -- the Client ---------------------------------------------------------------------------------
def client_usages(client: Client) -> None:
    client.pause_queue("email", by="ops@example.com")
    client.resume_queue("email")
    stats = client.queue_stats(window_minutes=15)
    print(stats[0].throughput_per_minute, client.live_workers()[0].hostname)
    client.cancel("7")  # E: arg-type
    client.cancel_by_unique_key(SendReceipt, args=SendReceipt(order_id=1), period_bucket=3)
    client.cancel_by_unique_key("send_receipt", queue="email")
    client.pause_queue("email", "ops")  # E: call-arg


# -- exactly-once effects: atomic handlers and typed follow-up builders (decision 015) ---------
@awa_django.job(Refund, atomic=True)
def refund_atomically(job: JobContext[Refund]) -> None:
    print(job.args.reason)


@awa_django.job(Refund, atomic="yes")  # E: arg-type
def refund_sloppily(job: JobContext[Refund]) -> None: ...


def receipt_then_refund(
    args: SendReceipt, done: awa_django.Completed[SendReceipt]
) -> list[awa_django.FollowUp]:
    return [awa_django.follow_up(Refund(reason=f"order {args.order_id}"), queue="email")]


def retried_note(args: SendReceipt, retried: awa_django.Retried[SendReceipt]) -> list[Refund]:
    return [Refund(reason=f"{retried.attempt}: {retried.error}, next {retried.next_run_at}")]


def wrong_builder(args: Refund, done: awa_django.Completed[Refund]) -> None: ...


awa_django.on_completed_enqueue(SendReceipt, receipt_then_refund)
awa_django.on_retried_enqueue(SendReceipt, retried_note)
awa_django.on_completed_enqueue(SendReceipt, wrong_builder)  # E: arg-type
awa_django.on_exhausted_enqueue(SendReceipt, receipt_then_refund)  # E: arg-type
awa_django.follow_up(Refund(reason="x"), prority=1)  # E: call-arg
