"""Delivers the worker's lifecycle events to hooks, off the hot path and bounded.

Events wait in a bounded backlog drained by a few consumer tasks; sync hooks run on a small
pool of their own. Each job's events go to one lane (by job id) with one consumer, so a
job's events reach its hooks in the order they committed (WaitingForCallback before the
resolution's event). A
slow hook costs claiming and completion nothing but the enqueue of its event.

The contract (docs/hooks.md, decision 010): one delivery per committed outcome, unless the
process crashes, the shutdown grace runs out, or the backlog overflows under the default
"drop" policy (counted, logged once per interval). Under "pause" nothing is dropped: the
runtime stops claiming while the backlog is full. A graceful stop delivers what is queued.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from awa_django.events import Event
from awa_django.registry import dispatch as hooks
from awa_django.registry import registry

logger = logging.getLogger("awa_django.hooks")

CAPACITY = 10_000
CONSUMERS = 4
DROP_LOG_INTERVAL = 10.0


class HookQueue:
    def __init__(
        self, capacity: int = CAPACITY, consumers: int = CONSUMERS, overflow: str = "drop"
    ) -> None:
        self.capacity = capacity
        self.drops_on_overflow = overflow == "drop"
        self.lanes: list[asyncio.Queue[Event]] = [asyncio.Queue() for _ in range(consumers)]
        self._arrived = asyncio.Event()
        self.threads = ThreadPoolExecutor(max_workers=consumers, thread_name_prefix="awa-hook")
        self.dropped = 0
        self.undelivered = 0  # queued or being delivered right now
        self._last_drop_log = 0.0
        # Called with (kind, seconds) after each delivery (the worker's metrics).
        self.on_delivered: Callable[[str, float], None] | None = None

    def put(self, event: Event) -> None:
        """Queue `event` for its hooks; never blocks. An event no hook wants (a kind without
        hooks, or a hook for other events) costs one lookup and takes no room."""
        if not registry.wants(event.job.kind, type(event)):
            return
        if self.drops_on_overflow and self.pending >= self.capacity:
            self._dropped(event)
            return
        self.lanes[event.job.id % len(self.lanes)].put_nowait(event)
        self.undelivered += 1
        self._arrived.set()

    @property
    def pending(self) -> int:
        """Events queued and not yet taken by a consumer."""
        return sum(lane.qsize() for lane in self.lanes)

    @property
    def full(self) -> bool:
        """The backlog reached its bound: under "pause" the runtime claims nothing more."""
        return self.pending >= self.capacity

    async def drain(self, timeout: float) -> int:
        """Wait up to `timeout` seconds for every queued event to be delivered (the
        consumers keep running); returns how many were not."""
        waiting = [asyncio.ensure_future(lane.join()) for lane in self.lanes]
        _, unfinished = await asyncio.wait(waiting, timeout=max(timeout, 0.0))
        for task in unfinished:
            task.cancel()
        return self.undelivered

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
        began = time.monotonic()
        try:
            await hooks.adispatch(event, threads=self.threads)
            if self.on_delivered is not None:
                self.on_delivered(event.job.kind, time.monotonic() - began)
        finally:
            self.undelivered -= 1
            lane.task_done()

    async def run(self) -> None:
        await asyncio.gather(*(self._consume(lane) for lane in self.lanes))

    async def _consume(self, lane: asyncio.Queue[Event]) -> None:
        while True:
            await self._deliver(lane)

    def close(self) -> None:
        """Whatever `drain` could not deliver in the grace period is abandoned here."""
        self.threads.shutdown(wait=False, cancel_futures=True)
