"""Writes and refreshes the leases of this process's attempts and flushes their buffered
progress.

It runs in its own thread on its own connection, so neither a sync handler holding the
GIL-bound pool nor an async handler that blocks the event loop can stop it (DESIGN §4).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import psycopg

from awa_django.codec import dumps
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Backoff, Database
from awa_django.worker.inflight import InFlight

logger = logging.getLogger("awa_django.worker")


class Heartbeat:
    def __init__(
        self,
        db: Database,
        inflight: InFlight,
        interval: float,
        deadlines: Mapping[str, float] | None = None,
    ) -> None:
        self.db = db
        self.inflight = inflight
        self.interval = interval
        # Each queue's deadline in seconds (0: none), for the lease an attempt's first beat
        # writes (decision 030); a queue not named has none.
        self.deadlines = deadlines or {}
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(target=self._run, name="awa-heartbeat", daemon=True)
        self.beats = 0

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """The beating thread runs (/readyz)."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop beating; waits up to `timeout` for a beat in flight (the thread is a
        daemon: one stuck on a dead connection does not hold the process)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def run_once(self) -> int:
        """One beat for every in-flight attempt (an attempt's first one writes its lease);
        returns how many are still owned. Attempts no longer owned (rescued, cancelled) get
        their cancel flag set."""
        jobs = self.inflight.snapshot()
        if not jobs:
            return 0
        conn = self._connection()
        beat = leases_sql.lease_heartbeat_many(
            ids=[j.id for j in jobs],
            leases=[j.run_lease for j in jobs],
            deadlines=[self.deadlines.get(j.queue, 0.0) for j in jobs],
        )
        owned = beat.run_on(conn)
        for job in jobs:
            if (job.id, job.run_lease) not in owned:
                job.mark_cancelled()
            elif (progress := job.take_progress()) is not None:
                flush = jobs_sql.job_progress_flush(
                    id=job.id, run_lease=job.run_lease, progress=dumps(progress, what="progress")
                )
                flush.run_on(conn)
        self.beats += 1
        return len(owned)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self.db.connect()
        return self._conn

    def _run(self) -> None:
        backoff = Backoff()
        wait = self.interval
        while not self._stop.wait(wait):
            try:
                self.run_once()
                backoff.reset()
                wait = self.interval
            except TRANSIENT_ERRORS as exc:
                self._drop_connection()
                wait = min(self.interval, backoff.next_delay())
                logger.warning("heartbeat failed (%s); retrying in %.1fs", exc, wait)
            except Exception:
                self._drop_connection()
                logger.exception("heartbeat failed unexpectedly")
        self._drop_connection()

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
