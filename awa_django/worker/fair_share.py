"""Weighted concurrency arithmetic (decision 017), with no I/O: one worker process's
`max_workers` slots shared among its queues.

Each queue keeps its `min_workers` slots to itself; the rest (the pool) is lent by weight
to the queues that have work. A queue's fair share of the pool is
`ceil(pool x weight / sum of weights of the active queues)` (Awa's ADR-011), a queue is active
while it wants slots or holds some, and a queue whose claim found nothing stops wanting, so
its share goes to the others. A queue capped by its `concurrency` below its share takes
only its cap and the others share the rest by weight (water-filling). Two rules beyond Awa
keep every wanting queue of weight > 0 from starving when the shares are rounded up or the
pool is smaller than the queues: a queue that already holds slots leaves one free slot to
each queue that wants and holds none, and those are served in the order they started
waiting.
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
        # The most pool slots each queue can use (its concurrency - min_workers); the
        # WeightedSlots keep it current, a runtime override included.
        self.caps: dict[str, float] = dict.fromkeys(self.weights, math.inf)
        # Queues that want slots; the ticket (taken when it started to want, or when it last
        # gave back its last slot) orders those holding none: first come, first served.
        self.wanting: dict[str, int] = {}
        self._tickets = itertools.count()

    @property
    def available(self) -> int:
        return self.pool - sum(self.held.values())

    def fair_share(self, queue: str) -> int:
        if self.weights[queue] <= 0:
            return 0
        active = [q for q in self.weights if q in self.wanting or self.held[q] > 0 or q == queue]
        return math.ceil(self._shares([q for q in active if self.weights[q] > 0])[queue])

    def _shares(self, queues: list[str]) -> dict[str, float]:
        """The pool by weight among `queues`; a queue capped below its part takes its cap
        and the others share what it leaves."""
        shares: dict[str, float] = {}
        remaining, open_ = float(self.pool), list(queues)
        while open_:
            total = sum(self.weights[q] for q in open_)
            capped = [q for q in open_ if self.caps[q] <= remaining * self.weights[q] / total]
            if not capped:
                shares.update({q: remaining * self.weights[q] / total for q in open_})
                break
            for q in capped:
                shares[q] = self.caps[q]
                remaining -= self.caps[q]
                open_.remove(q)
        return shares

    def acquire(self, queue: str, wanted: int) -> int:
        """Up to `wanted` pool slots for `queue` now (maybe 0); it counts as wanting."""
        if wanted <= 0:
            return 0
        self.wanting.setdefault(queue, next(self._tickets))
        granted = max(
            0, min(wanted, self._usable(queue), self.fair_share(queue) - self.held[queue])
        )
        self.held[queue] += granted
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
        if self.held[queue] == 0 and queue in self.wanting:
            self.wanting[queue] = next(self._tickets)  # back of the line of those holding none

    def idle(self, queue: str) -> None:
        """The queue's claim found fewer jobs than it asked for: it stops wanting slots."""
        self.wanting.pop(queue, None)
