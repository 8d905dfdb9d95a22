"""Delivers the worker's lifecycle events to hooks, off the hot path and bounded.

Events wait in a bounded queue drained by a few consumer tasks; sync hooks run on a small
pool of their own. A slow hook therefore costs claiming and completion nothing but the
enqueue of its event, and a hook that cannot keep up loses events (counted and logged)
instead of growing the worker's memory without limit. Hooks are best-effort by contract.
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
        self.queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=capacity)
        self.consumers = consumers
        self.threads = ThreadPoolExecutor(max_workers=consumers, thread_name_prefix="awa-hook")
        self.dropped = 0
        self._last_drop_log = 0.0

    def put(self, event: Event) -> None:
        """Queue `event` for its hooks; never blocks. Kinds without hooks cost one lookup."""
        if not registry.has_hooks(event.job.kind):
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self._dropped(event)

    def _dropped(self, event: Event) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._last_drop_log >= DROP_LOG_INTERVAL:
            self._last_drop_log = now
            logger.warning(
                "lifecycle hooks are %d events behind; dropped %d so far (latest: %s of job "
                "%s). Slow hooks should enqueue a job instead.",
                self.queue.qsize(),
                self.dropped,
                type(event).__name__,
                event.job.id,
            )

    async def run_once(self) -> None:
        """Deliver one queued event to its hooks (waits for one)."""
        event = await self.queue.get()
        try:
            await hooks.adispatch(event, threads=self.threads)
        finally:
            self.queue.task_done()

    async def run(self) -> None:
        await asyncio.gather(*(self._consume() for _ in range(self.consumers)))

    async def _consume(self) -> None:
        while True:
            await self.run_once()

    def close(self) -> None:
        """Shutdown does not wait for hooks (ADR-015): pending events are abandoned."""
        self.threads.shutdown(wait=False, cancel_futures=True)
