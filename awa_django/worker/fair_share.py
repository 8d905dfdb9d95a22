"""Weighted concurrency arithmetic (decision 017), with no I/O: one worker process's
`max_workers` slots shared among its queues.

Each queue keeps its `min_workers` slots to itself; the rest (the pool) is lent by weight
to the queues that have work. A queue's fair share of the pool is
`ceil(pool x weight / sum of weights of the active queues)` (Awa's ADR-011), a queue is active
while it wants slots or holds some, and a queue whose claim found nothing stops wanting, so
its share goes to the others. Two rules beyond Awa keep every wanting queue of weight > 0
from starving when the shares are rounded up or the pool is smaller than the queues:
a queue that already holds slots leaves one free slot to each queue that wants and holds
none, and those queues are served in the order they started waiting.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping


class FairShare:
    def __init__(self, pool: int, weights: Mapping[str, float]) -> None:
        self.pool = pool
        self.weights = dict(weights)
        self.held = dict.fromkeys(self.weights, 0)
        # Queues that want slots: the ticket orders those holding none (first come first).
        self.wanting: dict[str, int] = {}
        self._tickets = itertools.count()

    @property
    def available(self) -> int:
        return self.pool - sum(self.held.values())

    def fair_share(self, queue: str) -> int:
        active = [q for q in self.weights if q in self.wanting or self.held[q] > 0 or q == queue]
        total = sum(self.weights[q] for q in active)
        if total <= 0 or self.weights[queue] <= 0:
            return 0
        return math.ceil(self.pool * self.weights[queue] / total)

    def acquire(self, queue: str, wanted: int) -> int:
        """Up to `wanted` pool slots for `queue` now (maybe 0); it counts as wanting."""
        if wanted <= 0:
            return 0
        self.wanting.setdefault(queue, next(self._tickets))
        granted = max(
            0, min(wanted, self._usable(queue), self.fair_share(queue) - self.held[queue])
        )
        if granted:
            self.held[queue] += granted
            if self.held[queue] == granted:  # it held none: it is served, its turn ends
                self.wanting[queue] = next(self._tickets)
        return granted

    def _usable(self, queue: str) -> int:
        """The free slots this queue may take: none promised to a queue waiting before it."""
        mine = self.wanting[queue]
        ahead = sum(
            1
            for other, ticket in self.wanting.items()
            if other != queue
            and self.held[other] == 0
            and self.weights[other] > 0
            and (self.held[queue] > 0 or ticket < mine)
        )
        return self.available - ahead

    def release(self, queue: str, count: int = 1) -> None:
        """Slots given back: a finished job's, or those a claim did not fill."""
        self.held[queue] = max(0, self.held[queue] - count)

    def idle(self, queue: str) -> None:
        """The queue's claim found fewer jobs than it asked for: it stops wanting slots."""
        self.wanting.pop(queue, None)
