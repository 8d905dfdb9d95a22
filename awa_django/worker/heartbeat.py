"""Writes and refreshes the leases of this process's attempts and flushes their buffered
progress, and removes a lease it wrote for an attempt that was ending meanwhile.

It runs in its own thread on its own connection, so neither a sync handler holding the
GIL-bound pool nor an async handler that blocks the event loop can stop it (DESIGN §4).

A beat that runs while an attempt's outcome is written can write that attempt's lease
after the outcome's statement looked for it (decision 033): the outcome deletes only the
lease its snapshot sees. So each beat notes the attempts it beat that were already ending
when it committed, and once each has left the in-flight map (its outcome committed) it
deletes their leases, guarded on the job no longer running under them: within
SWEEP_INTERVAL of the outcome, not at the leader's orphan sweep.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import psycopg

from awa_django.codec import dumps
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.worker.database import TRANSIENT_ERRORS, Backoff, Database
from awa_django.worker.inflight import InFlight

logger = logging.getLogger("awa_django.worker")

# How soon a lease a beat wrote for an ending attempt is looked at again (an outcome's
# write takes milliseconds).
SWEEP_INTERVAL = 0.05


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
        # (job id, run_lease) of leases a beat wrote for attempts that were ending.
        self.ending: set[tuple[int, int]] = set()

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
            self.sweep()
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
        # Checked after the commit: an attempt that starts ending later writes its
        # outcome with a snapshot that sees this beat's lease, and deletes it. One no
        # longer owned (cancelled, rescued) may have lost its lease to a statement that
        # ran beside the previous beat: its lease goes too once the attempt stops here.
        lost = {(j.id, j.run_lease) for j in jobs} - owned
        self.ending |= self.inflight.ended_or_ending(owned) | lost
        self.sweep()
        return len(owned)

    def sweep(self) -> int:
        """Delete the leases noted in `ending` whose attempt has left the in-flight map
        (its outcome committed, so a fresh statement sees it); returns how many."""
        gone = self.inflight.gone(self.ending)
        if not gone:
            return 0
        pairs = sorted(gone)
        removed = leases_sql.lease_delete_ended(
            ids=[job_id for job_id, _ in pairs], leases=[lease for _, lease in pairs]
        ).run_on(self._connection())
        self.ending -= gone
        return removed

    def _next_wait(self, next_beat: float) -> float:
        until_beat = max(0.0, next_beat - time.monotonic())
        return min(SWEEP_INTERVAL, until_beat) if self.ending else until_beat

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self.db.connect()
        return self._conn

    def _run(self) -> None:
        backoff = Backoff()
        next_beat = time.monotonic() + self.interval
        wait = self._next_wait(next_beat)
        while not self._stop.wait(wait):
            try:
                if time.monotonic() >= next_beat:
                    self.run_once()
                    next_beat = time.monotonic() + self.interval
                else:
                    self.sweep()
                backoff.reset()
                wait = self._next_wait(next_beat)
            except TRANSIENT_ERRORS as exc:
                self._drop_connection()
                wait = min(self.interval, backoff.next_delay())
                logger.warning("heartbeat failed (%s); retrying in %.1fs", exc, wait)
            except Exception:
                self._drop_connection()
                logger.exception("heartbeat failed unexpectedly")
        self._last_sweep()
        self._drop_connection()

    def _last_sweep(self) -> None:
        """On the way out the attempts have ended: leave none of their leases behind (the
        leader's orphan sweep would not come if the whole fleet stops)."""
        if not self.ending:
            return
        try:
            self.sweep()
        except Exception as exc:
            logger.warning("could not remove %d ended leases (%s)", len(self.ending), exc)

    def close(self) -> None:
        """Close the connection of a heartbeat driven by run_once() alone (tests)."""
        self._drop_connection()

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
