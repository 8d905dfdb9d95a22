"""How many jobs a dispatcher may start: its queue's own fixed `concurrency` (the default),
or its `min_workers` plus what the worker's shared pool lends it (weighted concurrency,
worker/fair_share.py). A runtime override of the concurrency sets the cap in both modes.

The dispatcher reserves slots before a claim, hands back those the claim did not fill, and
frees one as each attempt ends; `running` counts the reserved and busy slots.
"""

from __future__ import annotations

from collections.abc import Callable

from awa_django.worker.fair_share import FairShare


class FixedSlots:
    """`concurrency` slots of its own: exactly the dispatcher's behaviour before weights."""

    def __init__(self, concurrency: int) -> None:
        self.cap = concurrency
        self.running = 0

    def reserve(self) -> int:
        free = max(0, self.cap - self.running)
        self.running += free
        return free

    def unreserve(self, count: int, *, found_all: bool) -> None:
        self.running -= count

    def release(self) -> None:
        self.running -= 1


class WeightedSlots:
    """`min_workers` slots of its own, plus pool slots from the worker's FairShare, never
    more than `cap` (the queue's concurrency) in all."""

    def __init__(
        self,
        queue: str,
        cap: int,
        min_workers: int,
        share: FairShare,
        on_pool_freed: Callable[[], None] = lambda: None,
    ) -> None:
        self.queue = queue
        self.cap = cap
        self.min_workers = min_workers
        self.share = share
        self.on_pool_freed = on_pool_freed
        self.running = 0
        self.borrowed = 0  # of `running`, how many are pool slots

    def reserve(self) -> int:
        wanted = max(0, self.cap - self.running)
        own = min(wanted, max(0, self.min_workers - (self.running - self.borrowed)))
        self.share.caps[self.queue] = max(0, self.cap - self.min_workers)
        lent = self.share.acquire(self.queue, wanted - own) if wanted > own else 0
        self.borrowed += lent
        self.running += own + lent
        return own + lent

    def unreserve(self, count: int, *, found_all: bool) -> None:
        """`count` reserved slots the claim did not fill; pool slots go back first."""
        if not found_all:
            self.share.idle(self.queue)
        self.running -= count
        self._give_back(min(count, self.borrowed))

    def release(self) -> None:
        self.running -= 1
        if self.borrowed > 0:
            self._give_back(1)

    def _give_back(self, count: int) -> None:
        if count > 0:
            self.borrowed -= count
            self.share.release(self.queue, count)
            self.on_pool_freed()
