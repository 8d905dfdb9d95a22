"""The waker role of a queue: which worker process claims when a NOTIFY arrives
(DESIGN §4 wake-ups, decision 025).

Only the role's holder LISTENs for the queue's enqueue hints, so a notification wakes one
process and costs one claim, not one of each per process (with the hints heard by every
process, 16 idle processes spent about 1 s of CPU ignoring 1,000 hints). Every process
LISTENs on the queue's role channel. The role is a session advisory lock on the holder's
LISTEN connection: it ends with that session (a crash, a lost connection), and the holder
gives it up whenever it cannot take work (no free slot, claims held back, shutdown) with a
`vacant` notification that wakes every process: there may be more work than the holder
could take, each claims, and the first to go idle takes the role, LISTENs for the hints
and claims at once (what was enqueued while nobody listened). Processes without the role
(standbys) still poll, every STANDBY_POLL_INTERVAL, and try for the role each time they go
idle: NOTIFY stays a hint, and no job waits on a busy or dead holder for longer than that.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from awa_django.channels import channel_for, role_channel_for
from awa_django.storage.query import Query
from awa_django.storage.sql import wakers as wakers_sql

T = TypeVar("T")


class Session(Protocol):
    """The LISTEN connection, as the roles see it (worker/listener.py)."""

    # Counts the LISTEN connections made: a role taken on one ends with it.
    generation: int

    @property
    def listening(self) -> bool: ...

    async def execute(self, query: Query[T], generation: int) -> T | None:
        """Run `query` on connection `generation`; None when that connection is gone."""
        ...


class Role(Protocol):
    """What a dispatcher asks of its queue's role."""

    @property
    def held(self) -> bool: ...

    @property
    def listening(self) -> bool: ...

    async def take(self) -> bool: ...

    async def give_up(self) -> None: ...


class EveryProcess:
    """No LISTEN connection, no roles: every process polls every POLL_INTERVAL, as a
    holder does (decision 020)."""

    held = True
    listening = False

    async def take(self) -> bool:
        return False

    async def give_up(self) -> None:
        return None


class WakerRole:
    """One queue's role in this process."""

    def __init__(self, queue: str, session: Session, handled: str = "") -> None:
        self.queue = queue
        # One role per queue and kind set (HandledKinds.signature, decision 032): a holder
        # that lacks a kind never keeps the hint of its enqueue from a worker that has it.
        self.key = wakers_sql.waker_key(queue, handled)
        self.channel = role_channel_for(queue)
        self.hint_channel = channel_for(queue)
        self.session = session
        self._held_on: int | None = None  # the session generation the lock was taken on

    @property
    def held(self) -> bool:
        return self._held_on is not None and self._held_on == self.session.generation

    @property
    def listening(self) -> bool:
        return self.session.listening

    async def take(self) -> bool:
        """Try for the role, and LISTEN for the hints once it is ours; True only when this
        call took it (the caller then claims at once: an enqueue's hint that arrived while
        nobody listened woke nobody)."""
        if self.held or not self.listening:
            return False
        generation = self.session.generation
        took = await self.session.execute(wakers_sql.waker_try_take(key=self.key), generation)
        # A connection lost meanwhile took the lock with it, whatever the answer said.
        if not took or generation != self.session.generation:
            return False
        self._held_on = generation
        await self.session.execute(wakers_sql.listen(self.hint_channel), generation)
        return self.held

    async def give_up(self) -> None:
        """Let another process take the role, and wake every process to claim and try."""
        if not self.held:
            return
        generation, self._held_on = self.session.generation, None
        await self.session.execute(
            wakers_sql.waker_give_up(key=self.key, channel=self.channel), generation
        )
        # Hints that arrive before this ends are ignored (the role is no longer held).
        await self.session.execute(wakers_sql.unlisten(self.hint_channel), generation)
