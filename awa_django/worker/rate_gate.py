"""The rate limit in front of a dispatcher's claim: tokens are taken for the slots it
reserved, the claim asks for no more jobs than it got, and unused tokens go back.

`LocalRate` keeps the bucket in this process (no I/O: a limit per worker process, so N
processes allow N x rate). `GlobalRate` keeps it in one `awa_rate_buckets` row per queue,
refilled from the database clock, so the limit holds across every worker process: it costs
one more short statement per claim round (two when the claim comes back short) and the
takers of one queue serialize on that row. Decision 017; docs/flow-control.md.
"""

from __future__ import annotations

import time
from typing import Protocol

from awa_django.limits import RateLimit
from awa_django.storage.sql import queues as queues_sql
from awa_django.worker.database import Database
from awa_django.worker.token_bucket import Grant, TokenBucket, next_token_in


class RateGate(Protocol):
    limit: RateLimit

    async def take(self, wanted: int) -> Grant: ...

    async def give_back(self, unused: int) -> None: ...

    def retune(self, limit: RateLimit) -> None: ...


class LocalRate:
    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self.bucket = TokenBucket(limit, time.monotonic())

    async def take(self, wanted: int) -> Grant:
        return self.bucket.take(wanted, time.monotonic())

    async def give_back(self, unused: int) -> None:
        self.bucket.give_back(unused)

    def retune(self, limit: RateLimit) -> None:
        self.limit = limit
        self.bucket.retune(limit)


class GlobalRate:
    def __init__(self, queue: str, limit: RateLimit, db: Database) -> None:
        self.queue = queue
        self.limit = limit
        self.db = db

    async def take(self, wanted: int) -> Grant:
        granted, left = await self.db.run(
            queues_sql.rate_bucket_take(
                queue=self.queue, wanted=wanted, rate=self.limit.rate, burst=self.limit.burst
            )
        )
        wait = 0.0 if granted >= wanted else next_token_in(left, self.limit.rate)
        return Grant(granted, wait)

    async def give_back(self, unused: int) -> None:
        if unused > 0:
            await self.db.run(
                queues_sql.rate_bucket_give_back(
                    queue=self.queue, unused=unused, burst=self.limit.burst
                )
            )

    def retune(self, limit: RateLimit) -> None:
        self.limit = limit


def rate_gate(queue: str, limit: RateLimit, scope: str, db: Database) -> RateGate:
    return GlobalRate(queue, limit, db) if scope == "global" else LocalRate(limit)
