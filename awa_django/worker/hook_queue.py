"""Delivers the worker's lifecycle events to hooks, off the hot path and bounded.

Events wait in a bounded queue drained by a few consumer tasks; sync hooks run on a small
pool of their own. Each job's events go to one lane (by job id) with one consumer, so a
job's events reach its hooks in the order they committed (Rescued before Exhausted). A
slow hook therefore costs claiming and completion nothing but the enqueue of its event,
and a hook that cannot keep up loses events (counted and logged) instead of growing the
worker's memory without limit. Hooks are best-effort by contract.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from awa_django.events import Event
from awa_django.registry import dispatch as hooks
from awa_django.registry import registry

logger = logging.getLogger("awa_django.hooks")

CAPACITY = 10_000
CONSUMERS = 4
DROP_LOG_INTERVAL = 10.0


class HookQueue:
    def __init__(self, capacity: int = CAPACITY, consumers: int = CONSUMERS) -> None:
        self.capacity = capacity
        self.lanes: list[asyncio.Queue[Event]] = [asyncio.Queue() for _ in range(consumers)]
        self._arrived = asyncio.Event()
        self.threads = ThreadPoolExecutor(max_workers=consumers, thread_name_prefix="awa-hook")
        self.dropped = 0
        self._last_drop_log = 0.0

    def put(self, event: Event) -> None:
        """Queue `event` for its hooks; never blocks. Kinds without hooks cost one lookup."""
        if not registry.has_hooks(event.job.kind):
            return
        if self.pending >= self.capacity:
            self._dropped(event)
            return
        self.lanes[event.job.id % len(self.lanes)].put_nowait(event)
        self._arrived.set()

    @property
    def pending(self) -> int:
        """Events queued and not yet taken by a consumer."""
        return sum(lane.qsize() for lane in self.lanes)

    def _dropped(self, event: Event) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._last_drop_log >= DROP_LOG_INTERVAL:
            self._last_drop_log = now
            logger.warning(
                "lifecycle hooks are %d events behind; dropped %d so far (latest: %s of job "
                "%s). Slow hooks should enqueue a job instead.",
                self.pending,
                self.dropped,
                type(event).__name__,
                event.job.id,
            )

    async def run_once(self) -> None:
        """Deliver one queued event to its hooks (waits for one)."""
        while True:
            for lane in self.lanes:
                if not lane.empty():
                    return await self._deliver(lane)
            self._arrived.clear()
            await self._arrived.wait()

    async def _deliver(self, lane: asyncio.Queue[Event]) -> None:
        event = await lane.get()
        try:
            await hooks.adispatch(event, threads=self.threads)
        finally:
            lane.task_done()

    async def run(self) -> None:
        await asyncio.gather(*(self._consume(lane) for lane in self.lanes))

    async def _consume(self, lane: asyncio.Queue[Event]) -> None:
        while True:
            await self._deliver(lane)

    def close(self) -> None:
        """Shutdown does not wait for hooks (ADR-015): pending events are abandoned."""
        self.threads.shutdown(wait=False, cancel_futures=True)
