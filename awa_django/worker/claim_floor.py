"""Where a dispatcher's next claim starts in its queue's dispatch order (decision 027).

A claim takes the first available rows in (priority, run_at, id) order. Each row it takes
leaves its dispatch-index entry behind, and PostgreSQL skips such an entry cheaply only
once no open snapshot anywhere in the cluster could still see the row as available. While
one is open (a long report, `pg_dump`, an `idle in transaction` session) a claim that
scans from the start of the queue re-reads every entry claimed since that snapshot began,
so a long drain slows with the square of what it has drained.

A dispatcher therefore remembers the key of the last row of a claim that came back full
and starts its next claim after it. The floor is a hint, never the truth: a row can become
available below it (a new job of a higher priority, a scheduled job promoted with an old
`run_at`, priority aging, a row another session held locked as we passed). A complete scan
finds those, and one runs after every wake-up (work made available sends a NOTIFY), after a
claim from the floor that came back short, and at least every `FULL_SCAN_INTERVAL`, which
bounds how long a row below the floor can wait while the queue is busy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql.jobs import DispatchKey

FULL_SCAN_INTERVAL = 1.0  # seconds; one complete scan per second per dispatcher at most


class ClaimFloor:
    def __init__(
        self,
        interval: float = FULL_SCAN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._key: DispatchKey | None = None
        self._full_scan_due = 0.0

    def start(self) -> DispatchKey | None:
        """Where the next claim starts: after this key, or at the beginning (None)."""
        if self._key is not None and self.clock() < self._full_scan_due:
            return self._key
        return None

    def claimed(self, start: DispatchKey | None, rows: Sequence[JobSnapshot], limit: int) -> bool:
        """Record a claim that started at `start` and took `rows` (in dispatch order) of
        `limit`. True when the caller should claim again at once: a pass from the floor
        came back short, and rows may wait below it."""
        if start is None:
            self._full_scan_due = self.clock() + self.interval
        if rows and len(rows) == limit:
            last = rows[-1]
            self._key = (last.priority, last.run_at, last.id)
            return False
        self._key = None
        return start is not None

    def reset(self) -> None:
        """Work may have appeared anywhere in the queue: the next claim scans it all."""
        self._key = None
