"""The Client's dead-letter verbs (docs/dead-letters.md), each a short delegation to
`dead_letters.py`, with their async twins. `Client` inherits them, so client.py stays the
index of the other verbs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict, Unpack

from awa_django.client import dead_letters
from awa_django.client.dead_letters import Filters, Target
from awa_django.client.twins import async_twin
from awa_django.snapshot import DeadLetterPage, DeadLetterRetry, DeadLetterSnapshot, JobSnapshot


def _ids(ids: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if ids is None else tuple(ids)


class Which(TypedDict, total=False):
    """The filters every dead-letter listing and bulk verb takes, spelled once."""

    kind: str | None
    queue: str | None
    tag: str | None
    reason: str | None  # a DeadLetterReason value


def _filters(which: Which, ids: Iterable[int] | None = None) -> Filters:
    return Filters(**which, ids=_ids(ids))


class DeadLetterVerbs:
    @property
    def using(self) -> str:  # the Client's database alias
        raise NotImplementedError

    def dead_letters(
        self, *, limit: int = 100, after: str | None = None, **which: Unpack[Which]
    ) -> DeadLetterPage:
        """One page of dead letters, newest first, filtered by any of kind, queue, tag and
        reason (a DeadLetterReason value). Pass `page.next_cursor` as `after` for the next.

            page = client.dead_letters(queue="payments")
            while page.next_cursor:
                page = client.dead_letters(queue="payments", after=page.next_cursor)
        """
        return dead_letters.page(self.using, _filters(which), limit, after)

    def dead_letter(self, job_id: int) -> DeadLetterSnapshot:
        """The dead letter of job `job_id`; DeadLetterNotFound if there is none."""
        return dead_letters.get(self.using, job_id)

    def count_dead_letters(self, **which: Unpack[Which]) -> int:
        """How many dead letters match the filters (all of them without any)."""
        return dead_letters.count(self.using, _filters(which))

    def dead_letter_depth(self) -> dict[str, int]:
        """Dead letters per queue (queues without any are left out)."""
        return dead_letters.depth(self.using)

    def retry_dead_letter(
        self, job_id: int, *, to_queue: str | None = None, priority: int | None = None
    ) -> JobSnapshot:
        """Put the job back among the jobs, `available` now, its attempts reset and its
        error history kept, on `to_queue` / at `priority` if given; the dead letter goes in
        the same transaction. DeadLetterNotFound; UniqueConflict (nothing changed) when a
        live job holds its unique key."""
        return dead_letters.retry_one(self.using, job_id, Target(to_queue, priority))

    def retry_dead_letters(
        self,
        *,
        ids: Iterable[int] | None = None,
        all: bool = False,
        to_queue: str | None = None,
        priority: int | None = None,
        **which: Unpack[Which],
    ) -> DeadLetterRetry:
        """`retry_dead_letter` for every dead letter matching the filters (`ids`: these job
        ids only), in batches (one transaction each). Without a filter it needs `all=True`
        (DeadLetterFilterRequired). Dead letters whose unique key a live job holds stay,
        listed in `conflicts`."""
        filters = _filters(which, ids).required("retry_dead_letters", all)
        return dead_letters.retry_many(self.using, filters, Target(to_queue, priority))

    def purge_dead_letter(self, job_id: int) -> bool:
        """Delete one dead letter for good; False if there was none."""
        return dead_letters.purge_one(self.using, job_id)

    def purge_dead_letters(
        self, *, ids: Iterable[int] | None = None, all: bool = False, **which: Unpack[Which]
    ) -> int:
        """Delete the dead letters matching the filters (`ids`: these job ids only), in
        batches; how many. Without a filter it needs `all=True` (DeadLetterFilterRequired)."""
        filters = _filters(which, ids).required("purge_dead_letters", all)
        return dead_letters.purge_many(self.using, filters)

    def dead_letter_failed(
        self, *, kind: str | None = None, queue: str | None = None, all: bool = False
    ) -> int:
        """Move `failed` jobs of `kind` and/or `queue` (any queue, dead-letter or not) into
        the dead letters with reason `manual`, in batches; how many. Without a filter it
        needs `all=True` (DeadLetterFilterRequired)."""
        Filters(kind, queue).required("dead_letter_failed", all)
        return dead_letters.enter_failed(self.using, kind, queue)

    adead_letters = async_twin(dead_letters)
    adead_letter = async_twin(dead_letter)
    acount_dead_letters = async_twin(count_dead_letters)
    adead_letter_depth = async_twin(dead_letter_depth)
    aretry_dead_letter = async_twin(retry_dead_letter)
    aretry_dead_letters = async_twin(retry_dead_letters)
    apurge_dead_letter = async_twin(purge_dead_letter)
    apurge_dead_letters = async_twin(purge_dead_letters)
    adead_letter_failed = async_twin(dead_letter_failed)
