"""Leader election by a lease row with an expiry (DESIGN §4 maintenance).

Not a session advisory lock: a leader whose network silently dropped would keep such a
lock for as long as the server believes its TCP session alive, and nobody would rescue
anything meanwhile. A lease expires on the database clock whatever the network does.
"""

from __future__ import annotations

import logging
import time

from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Database

logger = logging.getLogger("awa_django.worker")

LEASE_NAME = "maintenance"


class LeaderElector:
    def __init__(self, db: Database, holder: str, ttl: float) -> None:
        self.db = db
        self.holder = holder
        self.ttl = ttl
        self.is_leader = False
        self._valid_until = 0.0  # monotonic: when our last renewal stops covering us

    async def run_once(self) -> bool:
        """Take or renew the lease; True while this process leads."""
        asked_at = time.monotonic()
        try:
            leading = await self.db.run(
                maintenance_sql.leader_acquire_or_renew(
                    name=LEASE_NAME, holder=self.holder, ttl_seconds=self.ttl
                )
            )
        except TRANSIENT_ERRORS as exc:
            leading = False
            logger.warning("leader election failed: %s", exc)
        if leading != self.is_leader:
            logger.info("%s maintenance leadership", "took" if leading else "lost")
        self.is_leader = leading
        self._valid_until = asked_at + self.ttl if leading else 0.0
        return leading

    def still_valid(self) -> bool:
        """False once the lease may have expired (e.g. this process was paused)."""
        return self.is_leader and time.monotonic() < self._valid_until

    async def release(self) -> None:
        if self.is_leader:
            try:
                await self.db.run(
                    maintenance_sql.leader_release(name=LEASE_NAME, holder=self.holder)
                )
            except TRANSIENT_ERRORS as exc:
                logger.warning("could not release leadership (%s); it expires by itself", exc)
        self.is_leader = False
