"""Schedules the maintenance services while this process holds the leader lease."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from awa_django.worker.database import TRANSIENT_ERRORS
from awa_django.worker.maintenance.leader import LeaderElector

logger = logging.getLogger("awa_django.worker")

TICK = 0.05


class MaintenanceLoop:
    def __init__(
        self,
        elector: LeaderElector,
        election_interval: float,
        services: list[tuple[float, Callable[[], Awaitable[Any]]]],
    ) -> None:
        self.elector = elector
        self.election_interval = election_interval
        self.services = services  # (interval, run_once)
        self._next_run = [0.0] * len(services)
        self._next_election = 0.0

    async def run_once(self) -> None:
        now = time.monotonic()
        if now >= self._next_election:
            was_leading = self.elector.is_leader
            leading = await self.elector.run_once()
            if leading and not was_leading:
                # A new leader runs every service at once: the cron sync publishes its
                # declared schedules on taking the lead, rescue does not wait a period.
                self._next_run = [0.0] * len(self.services)
            # Renew at a third of the TTL so one late renewal never loses the lease.
            pause = self.elector.ttl / 3 if leading else self.election_interval
            self._next_election = now + pause
        for index, (interval, run_once) in enumerate(self.services):
            # Re-checked before every service: one slow step must not let the next one run
            # on a lease that has meanwhile expired.
            if not self.elector.still_valid():
                return
            if now >= self._next_run[index]:
                self._next_run[index] = now + interval
                try:
                    await run_once()
                except TRANSIENT_ERRORS as exc:
                    logger.warning("maintenance step failed: %s", exc)

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                logger.exception("maintenance failed unexpectedly")
            await asyncio.sleep(TICK)
