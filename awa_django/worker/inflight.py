"""The attempts this process is running, shared by the loop and the heartbeat thread."""

from __future__ import annotations

import threading

from awa_django.execution.context import JobContext


class InFlight:
    """Thread-safe map of (job id, run_lease) → the attempt's `JobContext` context."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[int, int], JobContext[object]] = {}
        # Attempts whose outcome is being written (or may be: an atomic handler commits
        # its own): a heartbeat that runs meanwhile may write a lease the outcome's
        # statement does not see (worker/heartbeat.py).
        self._ending: set[tuple[int, int]] = set()
        self._lock = threading.Lock()

    def add(self, job: JobContext[object]) -> None:
        with self._lock:
            self._jobs[(job.id, job.run_lease)] = job

    def remove(self, job: JobContext[object]) -> None:
        with self._lock:
            self._jobs.pop((job.id, job.run_lease), None)
            self._ending.discard((job.id, job.run_lease))

    def ending(self, job: JobContext[object]) -> None:
        """The attempt's outcome is about to be written; it stays here until it is."""
        with self._lock:
            if (job.id, job.run_lease) in self._jobs:
                self._ending.add((job.id, job.run_lease))

    def ended_or_ending(self, pairs: set[tuple[int, int]]) -> set[tuple[int, int]]:
        """Those of `pairs` whose attempt is ending here, or no longer runs here."""
        with self._lock:
            return {p for p in pairs if p in self._ending or p not in self._jobs}

    def gone(self, pairs: set[tuple[int, int]]) -> set[tuple[int, int]]:
        """Those of `pairs` no longer here: their outcome committed (or was given up)."""
        with self._lock:
            return {p for p in pairs if p not in self._jobs}

    def snapshot(self) -> list[JobContext[object]]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.id)

    def mark_cancelled(self, job_id: int, run_lease: int) -> bool:
        """Set the cooperative cancel flag of exactly that attempt, if it runs here."""
        with self._lock:
            job = self._jobs.get((job_id, run_lease))
        if job is None:
            return False
        job.mark_cancelled()
        return True

    def cancel_all(self) -> None:
        for job in self.snapshot():
            job.mark_cancelled()

    def __len__(self) -> int:
        return len(self._jobs)
