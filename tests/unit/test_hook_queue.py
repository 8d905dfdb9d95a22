"""The worker's hook queue: bounded, off the hot path, sync hooks on their own threads."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import awa_django
from awa_django.events import Completed, Started
from awa_django.worker.hook_queue import HookQueue

from .test_outcomes import make_row


def test_events_of_kinds_without_hooks_are_not_even_queued() -> None:
    async def scenario() -> int:
        queue = HookQueue(capacity=5)
        queue.put(Started(job=make_row(kind="unit_hq_nobody")))
        return queue.pending

    assert asyncio.run(scenario()) == 0


def test_a_full_queue_drops_and_counts_instead_of_blocking(clean_hooks) -> None:
    awa_django.on_event_kind("unit_hq_full", lambda event: None)

    async def scenario() -> tuple[int, int]:
        queue = HookQueue(capacity=2)
        for job_id in range(5):
            queue.put(Completed(job=make_row(kind="unit_hq_full", id=job_id)))
        queue.close()
        return queue.pending, queue.dropped

    assert asyncio.run(scenario()) == (2, 3)


def test_sync_hooks_run_on_the_queue_threads_in_registration_order(clean_hooks) -> None:
    seen: list[tuple[str, str]] = []

    def first(event: Completed) -> None:
        seen.append(("first", threading.current_thread().name))

    async def second(event: Completed) -> None:
        seen.append(("second", threading.current_thread().name))

    awa_django.on_event_kind("unit_hq_order", first)
    awa_django.on_event_kind("unit_hq_order", second)

    async def scenario() -> None:
        queue = HookQueue(capacity=10)
        queue.put(Completed(job=replace(make_row(kind="unit_hq_order"), state="completed")))
        await asyncio.wait_for(queue.run_once(), timeout=5)
        queue.close()

    asyncio.run(scenario())
    assert [name for name, _ in seen] == ["first", "second"]
    assert seen[0][1].startswith("awa-hook")  # not the loop's default executor
    assert seen[1][1] == "MainThread"  # async hooks run on the loop


def test_a_graceful_stop_delivers_the_backlog_in_each_jobs_order(clean_hooks) -> None:
    seen: list[tuple[int, str]] = []
    awa_django.on_event_kind("unit_hq_drain", lambda e: seen.append((e.job.id, type(e).__name__)))

    async def scenario() -> tuple[int, int]:
        queue = HookQueue(capacity=100, consumers=2)
        consumers = asyncio.ensure_future(queue.run())
        for job_id in range(10):
            queue.put(Started(job=make_row(kind="unit_hq_drain", id=job_id)))
            queue.put(Completed(job=make_row(kind="unit_hq_drain", id=job_id)))
        abandoned = await queue.drain(timeout=5)
        consumers.cancel()
        queue.close()
        return abandoned, queue.undelivered

    assert asyncio.run(scenario()) == (0, 0)
    assert len(seen) == 20
    for job_id in range(10):  # per job, the order the events were put in
        assert [name for jid, name in seen if jid == job_id] == ["Started", "Completed"]


def test_drain_reports_what_the_grace_left_undelivered(clean_hooks) -> None:
    release = threading.Event()
    awa_django.on_event_kind("unit_hq_slow", lambda e: release.wait(5))

    async def scenario() -> int:
        queue = HookQueue(capacity=100, consumers=1)
        consumers = asyncio.ensure_future(queue.run())
        for job_id in range(3):
            queue.put(Completed(job=make_row(kind="unit_hq_slow", id=job_id)))
        abandoned = await queue.drain(timeout=0.2)
        release.set()
        consumers.cancel()
        queue.close()
        return abandoned

    assert asyncio.run(scenario()) == 3  # one being delivered, two queued


def test_the_pause_policy_never_drops_and_reports_a_full_backlog(clean_hooks) -> None:
    awa_django.on_event_kind("unit_hq_pause", lambda event: None)

    async def scenario() -> tuple[int, int, bool]:
        queue = HookQueue(capacity=2, overflow="pause")
        for job_id in range(5):
            queue.put(Completed(job=make_row(kind="unit_hq_pause", id=job_id)))
        queue.close()
        return queue.pending, queue.dropped, queue.full

    assert asyncio.run(scenario()) == (5, 0, True)


def test_events_no_hook_wants_take_no_room_in_the_backlog(clean_hooks) -> None:
    """A kind hooked on Completed only: its Started events must not fill the backlog, or
    under "drop" they push out the Completed events a hook wants (and under "pause" they
    stop claiming for nothing)."""
    awa_django.on_event_kind("unit_hq_completed_only", lambda event: None, events={Completed})

    async def scenario() -> tuple[int, int]:
        queue = HookQueue(capacity=3)
        for job_id in range(3):
            row = make_row(kind="unit_hq_completed_only", id=job_id)
            queue.put(Started(job=row))
            queue.put(Completed(job=replace(row, state="completed")))
        queue.close()
        return queue.pending, queue.dropped

    assert asyncio.run(scenario()) == (3, 0)
