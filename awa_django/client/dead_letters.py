"""Dead letters on the Client's side (docs/dead-letters.md, decision 016): list, get,
count, retry, purge, and move already-failed jobs in.

Reads use the ORM; the moves between `awa_jobs_hot` and `awa_dead_letters` are named
statements (storage/sql/dead_letters.py), one per batch. Bulk operations walk their rows
by id in batches of BATCH, each batch its own transaction (a savepoint inside the caller's),
so a large operation never holds one long transaction, and they refuse to run without a
filter unless `all=True`. The ORM side of storage is imported on first use: `awa_django`
imports the client before Django may load models.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Count, Q

from awa_django.conf import validate_queue_name
from awa_django.exceptions import (
    DeadLetterFilterRequired,
    DeadLetterNotFound,
    InvalidDeadLetterQuery,
    UniqueConflict,
)
from awa_django.options import check_priority
from awa_django.snapshot import (
    DEAD_LETTER_COLUMNS,
    DeadLetterPage,
    DeadLetterRetry,
    DeadLetterSnapshot,
    JobSnapshot,
)
from awa_django.states import DeadLetterReason, JobState
from awa_django.storage.sql import dead_letters as dead_letters_sql

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from awa_django.storage.models import DeadLetter

BATCH = 500
MAX_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Filters:
    """Which dead letters a call is about; all None selects every one."""

    kind: str | None = None
    queue: str | None = None
    tag: str | None = None
    reason: str | None = None
    ids: tuple[int, ...] | None = None  # these job ids only (the admin's selection)

    def __post_init__(self) -> None:
        if self.ids is not None and not all(
            isinstance(i, int) and not isinstance(i, bool) for i in self.ids
        ):
            raise InvalidDeadLetterQuery(f"ids must be job ids, got {self.ids!r:.100}")
        for name in ("kind", "queue", "tag", "reason"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or "\x00" in value):
                raise InvalidDeadLetterQuery(f"{name} must be a string, got {value!r:.100}")
        if self.reason is not None and self.reason not in DeadLetterReason.values:
            raise InvalidDeadLetterQuery(
                f"unknown reason {self.reason!r:.100}; one of " + ", ".join(DeadLetterReason.values)
            )

    @property
    def empty(self) -> bool:
        return all(
            value is None for value in (self.kind, self.queue, self.tag, self.reason, self.ids)
        )

    def q(self) -> Q:
        found = Q()
        for field in ("kind", "queue", "reason"):
            if (value := getattr(self, field)) is not None:
                found &= Q(**{field: value})
        if self.tag is not None:
            found &= Q(tags__contains=[self.tag])
        if self.ids is not None:
            found &= Q(id__in=self.ids)
        return found

    def required(self, verb: str, all: bool) -> Filters:
        """Self, unless it is empty and `all` was not asked for."""
        if self.empty and all is not True:
            raise DeadLetterFilterRequired(
                f"{verb} needs a filter (kind=, queue=, tag=, reason=, ids=) or all=True"
            )
        return self


def _dead_letters(using: str) -> QuerySet[DeadLetter]:
    from awa_django.storage.models import DeadLetter

    return DeadLetter.objects.using(using)


def _snapshot(values: dict[str, Any]) -> DeadLetterSnapshot:
    return DeadLetterSnapshot(**{name: values[name] for name in DEAD_LETTER_COLUMNS})


# -- reads --------------------------------------------------------------------------------
def page(using: str, filters: Filters, limit: int, after: str | None) -> DeadLetterPage:
    """Newest first, keyset-paginated on (dead_lettered_at, id)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidDeadLetterQuery(f"limit must be 1..{MAX_PAGE}, got {limit!r:.100}")
    rows = _dead_letters(using).filter(filters.q())
    if after is not None:
        at, job_id = _decode_cursor(after)
        rows = rows.filter(Q(dead_lettered_at__lt=at) | Q(dead_lettered_at=at, id__lt=job_id))
    found = list(
        rows.order_by("-dead_lettered_at", "-id").values(*DEAD_LETTER_COLUMNS)[: limit + 1]
    )
    items = tuple(_snapshot(values) for values in found[:limit])
    more = len(found) > limit
    return DeadLetterPage(items, _encode_cursor(items[-1]) if more else None)


def _encode_cursor(last: DeadLetterSnapshot) -> str:
    text = f"{last.dead_lettered_at.isoformat()}|{last.id}"
    return base64.urlsafe_b64encode(text.encode()).decode()


def _decode_cursor(cursor: object) -> tuple[dt.datetime, int]:
    try:
        text = base64.urlsafe_b64decode(str(cursor).encode()).decode()
        at, _, job_id = text.partition("|")
        moment = dt.datetime.fromisoformat(at)
        if moment.tzinfo is None:
            raise ValueError("naive")
        return moment, int(job_id)
    except (ValueError, UnicodeError, binascii.Error):
        raise InvalidDeadLetterQuery(
            f"not a dead-letter cursor: {cursor!r:.100} (pass a page's next_cursor)"
        ) from None


def get(using: str, job_id: int) -> DeadLetterSnapshot:
    found = _dead_letters(using).filter(id=job_id).values(*DEAD_LETTER_COLUMNS).first()
    if found is None:
        raise DeadLetterNotFound(f"no dead letter for job {job_id}")
    return _snapshot(found)


def count(using: str, filters: Filters) -> int:
    return _dead_letters(using).filter(filters.q()).count()


def depth(using: str) -> dict[str, int]:
    """Dead letters per queue, by queue name."""
    rows = _dead_letters(using).values("queue").annotate(n=Count("id")).order_by("queue")
    return {row["queue"]: row["n"] for row in rows}


# -- retry --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Target:
    """Where a retried dead letter goes: its own queue and priority unless given."""

    queue: str | None = None
    priority: int | None = None

    def __post_init__(self) -> None:
        if self.queue is not None:
            validate_queue_name(self.queue)
        if self.priority is not None:
            check_priority(self.priority)


def retry_one(using: str, job_id: int, target: Target) -> JobSnapshot:
    """The job back among the jobs, available now; DeadLetterNotFound, or UniqueConflict
    (nothing changed) when a live job holds its unique key."""
    with transaction.atomic(using=using):
        rows = _retry(using, [job_id], target)
        if rows:
            return rows[0]
        if _dead_letters(using).filter(id=job_id).exists():
            raise UniqueConflict(
                f"dead letter {job_id} was not retried: a live job holds its unique key; "
                "retry it once that job has finished, or purge it"
            )
        raise DeadLetterNotFound(f"no dead letter for job {job_id}")


def retry_many(using: str, filters: Filters, target: Target) -> DeadLetterRetry:
    retried: list[int] = []
    conflicts: list[int] = []
    for ids in _batches(using, filters):
        with transaction.atomic(using=using):
            done = {row.id for row in _retry(using, ids, target)}
        retried += sorted(done)
        missed = [i for i in ids if i not in done]
        conflicts += _dead_letters(using).filter(id__in=missed).values_list("id", flat=True)
    return DeadLetterRetry(tuple(retried), tuple(sorted(conflicts)))


def _retry(using: str, ids: list[int], target: Target) -> list[JobSnapshot]:
    query = dead_letters_sql.dead_letter_retry_many(
        ids=ids, queue=target.queue, priority=target.priority
    )
    return query.run(using)


# -- purge and move in ----------------------------------------------------------------------
def purge_one(using: str, job_id: int) -> bool:
    deleted, _ = _dead_letters(using).filter(id=job_id).delete()
    return deleted > 0


def purge_many(using: str, filters: Filters) -> int:
    total = 0
    for ids in _batches(using, filters):
        with transaction.atomic(using=using):
            deleted, _ = _dead_letters(using).filter(id__in=ids).delete()
        total += deleted
    return total


def enter_failed(using: str, kind: str | None, queue: str | None) -> int:
    """Move `failed` jobs (of `kind` and/or `queue`) into the dead letters as `manual`."""
    from awa_django.storage.models import Job

    failed = Job.objects.using(using).filter(state=JobState.FAILED)
    failed = failed.filter(**{k: v for k, v in (("kind", kind), ("queue", queue)) if v})
    total = 0
    for ids in _walk(lambda after: failed.filter(id__gt=after)):
        with transaction.atomic(using=using):
            total += dead_letters_sql.dead_letter_enter_failed(ids=ids).run(using)
    return total


def _batches(using: str, filters: Filters) -> Iterator[list[int]]:
    rows = _dead_letters(using).filter(filters.q())
    return _walk(lambda after: rows.filter(id__gt=after))


def _walk(after: Callable[[int], QuerySet[Any]]) -> Iterator[list[int]]:
    """The ids of the rows, in batches of at most BATCH, by ascending id: rows a batch
    leaves in place (a unique conflict) are never selected again."""
    last = 0
    while True:
        ids = list(after(last).order_by("id").values_list("id", flat=True)[:BATCH])
        if ids:
            yield ids
        if len(ids) < BATCH:
            return
        last = ids[-1]
