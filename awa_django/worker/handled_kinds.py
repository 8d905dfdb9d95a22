"""The kinds this worker process claims: those it has a handler for (decision 032).

A worker that claimed every kind of its queues took, during a rolling deploy, jobs it had
no handler for; it handed them back and, holding its queue's waker role, took them again
as soon as they were due, while a worker with the handler waited for a poll. Now its claim
names its kinds, and the waker role is per queue and kind set, so the hint of an enqueue
reaches a process of each kind set. Two cases still reach a worker without the handler:

- a django.tasks task (its kind is an import path, resolved on demand) whose module this
  worker cannot import: the job is handed back once, and this process never claims that
  path again (`refuse`);
- a job of a kind it lacks that has been due for UNKNOWN_KIND_GRACE: it claims it and fails
  it (`unknown job kind`), as decision 011 failed a kind handed back for that long.
"""

from __future__ import annotations

import hashlib

from awa_django.registry import registry
from awa_django.storage.sql.jobs import ClaimKinds


class HandledKinds:
    def __init__(self, grace: float) -> None:
        # A grace of 0 fails an unknown kind at once: every kind is claimed, as before.
        self.grace = grace
        self._refused: set[str] = set()
        self._current: ClaimKinds | None = None

    @property
    def filtered(self) -> bool:
        return self.grace > 0

    def claim_kinds(self) -> ClaimKinds | None:
        """What the next claim takes (None: every kind). Read from the registry at the
        first claim, once every app has registered its jobs."""
        if not self.filtered:
            return None
        if self._current is None:
            self._current = ClaimKinds(
                known=tuple(sorted(d.kind for d in registry.jobs())),
                dotted=registry.resolves_on_demand,
                refused=tuple(sorted(self._refused)),
                grace=self.grace,
            )
        return self._current

    @property
    def signature(self) -> str:
        """Names the kind set, for the waker role (worker/waker.py): processes with the
        same handlers share a role; "" (every kind) is the role of earlier releases."""
        kinds = self.claim_kinds()
        if kinds is None:
            return ""
        text = "\n".join([*kinds.known, f"dotted={kinds.dotted}"])
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def refuse(self, kind: str) -> None:
        """This process could not load a handler for `kind`: claim it no more. Only import
        paths can get here; an overdue job of another kind is failed, not handed back."""
        if not self.filtered or kind in self._refused or "." not in kind:
            return
        self._refused.add(kind)
        self._current = None
