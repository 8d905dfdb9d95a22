"""Claims jobs for one queue, as many as it has free slots, in one statement (DESIGN §4).

Each claim starts where its previous full claim ended (worker/claim_floor.py), so an old
snapshot elsewhere in the cluster does not make it re-read what it already took.

It claims on a NOTIFY for its queue while this process holds the queue's waker role (only
the holder LISTENs for them), on any process's `vacant` one (worker/waker.py), on a freed
slot while the queue may hold more work, and on the poll timer: POLL_INTERVAL for the
role's holder and whenever NOTIFY cannot reach this process, STANDBY_POLL_INTERVAL
otherwise (NOTIFY is only a hint; the timers alone keep it correct). Its slots are the
queue's own or a share of the worker's (worker/slots.py); a rate-limited queue takes tokens
for them first and, when it has work but no token, sleeps until the next one is due
(worker/rate_gate.py). Runtime overrides retune both (`apply_limits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from awa_django.channels import WAKER_VACANT
from awa_django.conf import QueueConfig
from awa_django.limits import RateLimit
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.claim_floor import ClaimFloor
from awa_django.worker.database import TRANSIENT_ERRORS, Backoff, Database
from awa_django.worker.handled_kinds import HandledKinds
from awa_django.worker.metrics import WorkerMetrics
from awa_django.worker.rate_gate import RateGate, rate_gate
from awa_django.worker.slots import FixedSlots
from awa_django.worker.waker import EveryProcess, Role

logger = logging.getLogger("awa_django.worker")

# An attempt whose handler runs on the loop starts at once, inside the claim's turn of the
# loop, instead of one turn later: its handler runs (and a short one releases its slot)
# before run_once returns, so the next claim for the freed slots goes out without waiting
# for the loop to come round, and no probe waits a turn more for its start. Measured
# (docs/performance.md): async drain +6 %, herd pickup p99 10.5 -> 6.8 ms. Not for
# handlers run on threads: started eagerly, the sync drain lost a quarter. Nor on a loop
# with a task factory of its own (an APM's), which every task must go through.
_start_eagerly = asyncio.create_eager_task_factory(asyncio.Task)


class Slots(Protocol):
    cap: int
    running: int

    def reserve(self) -> int: ...

    def unreserve(self, count: int, *, found_all: bool) -> None: ...

    def release(self) -> None: ...


class Dispatcher:
    def __init__(
        self,
        queue: QueueConfig,
        db: Database,
        execute: Callable[[JobSnapshot, Callable[[], None]], Awaitable[None]],
        worker_id: str,
        poll_interval: float,
        may_claim: Callable[[], bool] = lambda: True,
        slots: Slots | None = None,
        metrics: WorkerMetrics | None = None,
        standby_interval: float | None = None,
        starts_at_once: Callable[[JobSnapshot], bool] = lambda row: False,
        lease_now: bool = True,
        handled: HandledKinds | None = None,
    ) -> None:
        self.queue = queue
        # The kinds its claims take (None: every kind); its role is per kind set.
        self.handled = handled
        # Whether claims write the leases, or the heartbeat does (attempt.lease_at_claim).
        self.lease_now = lease_now
        self.db = db
        self.execute = execute
        # Whether the attempt of a claimed row starts within the claim (_start_eagerly).
        self.starts_at_once = starts_at_once
        self.worker_id = worker_id
        self.poll_interval = poll_interval
        # How often a standby polls (the role's holder hears every hint); None: as often.
        self.standby_interval = standby_interval or poll_interval
        # The queue's waker role in this process; the Listener gives it one when it LISTENs.
        self.role: Role = EveryProcess()
        # False while the runtime holds claims back (a full hook backlog under "pause").
        self.may_claim = may_claim
        self.slots: Slots = slots or FixedSlots(queue.concurrency)
        self.rate: RateGate | None = None
        self.apply_limits(None, None)
        self.metrics = metrics or WorkerMetrics.disabled()
        self.stopping = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._maybe_more = True
        self.floor = ClaimFloor()
        self._blocked = False  # the last reserve got no slot (the shared pool is lent out)
        self._held_back = False  # the last run_once found claims held back (may_claim)
        self._token_due = 0.0  # monotonic time of the next token, while rate-limited

    @property
    def running(self) -> int:
        return self.slots.running

    @property
    def free_slots(self) -> int:
        return self.slots.cap - self.slots.running

    def apply_limits(self, concurrency: int | None, rate: RateLimit | None) -> None:
        """Runtime overrides (None: the queue's settings); takes effect at the next claim."""
        self.slots.cap = concurrency or self.queue.concurrency
        limit = rate or self.queue.rate_limit
        if limit is None:
            self.rate = None
        elif self.rate is None:
            self.rate = rate_gate(self.queue.name, limit, self.queue.rate_scope, self.db)
        elif self.rate.limit != limit:
            self.rate.retune(limit)

    def describe(self) -> str:
        """The effective limits, for the startup log and awa_status."""
        parts = [f"concurrency {self.slots.cap}"]
        if self.rate is not None:
            parts.append(f"rate {self.rate.limit} ({self.queue.rate_scope})")
        return ", ".join(parts)

    def wake(self) -> None:
        self.floor.reset()
        self._wake.set()

    def notified(self, payload: str) -> None:
        """A NOTIFY on one of the queue's channels. An enqueue's hint reaches only the
        role's holder (the only process LISTENing for hints): the herd this avoids is every
        idle process waking, and claiming, for the same job. A vacancy wakes every process:
        the holder filled up (or stops), so there may be more work than it could take; each
        claims, and the first to go idle with a free slot takes the role, LISTENs for the
        hints and claims again at once. (Letting only the process that takes the role
        claim made a chain of one claim per hop out of every burst: measured, pickup got
        slower.) A hint that arrives as the holder gives the role up is left to the
        vacancy's claims."""
        if payload == WAKER_VACANT or (payload == "" and self.role.held):
            self.wake()

    async def run_once(self) -> int:
        """Reserve the free slots (and as many tokens), claim up to that many jobs in one
        statement, start each one; what the claim did not fill goes back."""
        if self.stopping:
            return 0
        self._held_back = not self.may_claim()
        if self._held_back:
            self._maybe_more = False  # wait for the poll timer, do not spin
            return 0
        free = self.slots.reserve()  # reserve first: a slot is never promised twice
        self._blocked = free <= 0
        if self._blocked:
            return 0
        try:
            limit = await self._take_tokens(free)
            rows, look_again = await self._claim(limit) if limit else ([], False)
        except BaseException:
            self.slots.unreserve(free, found_all=True)
            raise
        self.slots.unreserve(free - len(rows), found_all=0 < len(rows) == limit)
        # A short claim from the floor says nothing about the rows below it: look again.
        self._maybe_more = len(rows) == free or look_again
        loop = asyncio.get_running_loop()
        eager = loop.get_task_factory() is None
        for row in rows:
            if eager and self.starts_at_once(row):
                task = _start_eagerly(loop, self._execute(row))
            else:
                task = loop.create_task(self._execute(row))
            if not task.done():
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        if self.rate is not None and len(rows) < limit:
            self._token_due = 0.0  # the queue ran dry, not the bucket
            await self.rate.give_back(limit - len(rows))  # after the starts: never strands a job
        return len(rows)

    async def _take_tokens(self, free: int) -> int:
        if self.rate is None:
            return free
        grant = await self.rate.take(free)
        self._token_due = time.monotonic() + grant.wait if grant.wait else 0.0
        return grant.granted

    async def _claim(self, limit: int) -> tuple[list[JobSnapshot], bool]:
        """Up to `limit` jobs, and whether to claim again at once (ClaimFloor.claimed)."""
        began = time.monotonic()
        start = self.floor.start()
        rows = await self.db.run(
            jobs_sql.job_claim_many(
                queue=self.queue.name,
                limit=limit,
                worker_id=self.worker_id,
                deadline_seconds=self.queue.deadline,
                lease_now=self.lease_now,
                after=start,
                kinds=self.handled.claim_kinds() if self.handled else None,
            )
        )
        self.metrics.claimed(self.queue.name, len(rows), time.monotonic() - began)
        return rows, self.floor.claimed(start, rows, limit)

    async def _execute(self, row: JobSnapshot) -> None:
        try:
            await self.execute(row, self._release)
        except Exception:
            # The attempt stays `running` without heartbeats: rescue picks it up later.
            logger.exception("job %s (%s): executor failed", row.id, row.kind)

    def _release(self) -> None:
        self.slots.release()
        if self._maybe_more:
            self._wake.set()

    async def run(self) -> None:
        backoff = Backoff()
        while not self.stopping:
            if not await self._claim_round(backoff):
                continue  # claim again at once: more work, a token, or after a back-off
            if await self._settle_role():
                continue  # took the role: claim what arrived while nobody held it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._idle_wait())
            self._wake.clear()
        await self._give_up_role()

    async def _claim_round(self, backoff: Backoff) -> bool:
        """One claim; False when the loop should not go idle after it."""
        try:
            await self.run_once()
            backoff.reset()
        except Exception as exc:
            if not isinstance(exc, TRANSIENT_ERRORS):
                logger.exception("claiming from %r failed unexpectedly", self.queue.name)
            delay = backoff.next_delay()
            logger.warning(
                "claiming from %r failed (%s); retrying in %.1fs", self.queue.name, exc, delay
            )
            await asyncio.sleep(delay)
            return False
        token_wait = self._token_due - time.monotonic()
        if self._token_due and token_wait > 0:
            # Work waits for a token: sleep until it is due (a wake-up would find none).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), token_wait)
            return False
        return not (self._maybe_more and not self._blocked and self.free_slots > 0)

    async def _settle_role(self) -> bool:
        """Hold the queue's waker role exactly while this process can take work; True when
        it has just taken it."""
        try:
            if self._can_take_work():
                return await self.role.take()
            await self.role.give_up()
        except Exception:
            # Never fatal: without the role this process is a standby, and standbys poll.
            logger.exception("settling the waker role of %r failed", self.queue.name)
        return False

    def _can_take_work(self) -> bool:
        return (
            not self.stopping and not self._held_back and not self._blocked and self.free_slots > 0
        )

    def _idle_wait(self) -> float:
        """The holder hears every hint and polls as often as before roles; so does every
        process while NOTIFY cannot reach it, or while it waits for a slot or for claims to
        be allowed again. A standby only backs the holder up (a busy or hung one)."""
        if self.role.held or not self.role.listening or self._held_back or self._blocked:
            return self.poll_interval
        return self.standby_interval

    async def _give_up_role(self) -> None:
        """On the way out the standbys hear at once that the role is free."""
        try:
            await self.role.give_up()
        except Exception:
            logger.exception("giving up the waker role of %r failed", self.queue.name)

    async def stop(self) -> None:
        """Stop claiming; in-flight attempts go on (the runtime waits for `tasks`)."""
        self.stopping = True
        self._stopped.set()
        self._wake.set()
