"""Job options as every path checks them: kind, queue, priority, max_attempts, tags, run_at
and metadata, for `enqueue`/`enqueue_many` and for `@job` declarations alike.

Each check runs before any SQL and raises a typed `AwaError` that says what is wrong and
how to fix it: a value PostgreSQL would refuse (a NUL, a lone surrogate, a too-long kind)
must never reach it, because the refusal would abort the caller's transaction.
"""

from __future__ import annotations

import datetime as dt
from typing import TypeGuard

from awa_django.conf import MAX_MAX_ATTEMPTS, MAX_PRIORITY, MIN_MAX_ATTEMPTS, MIN_PRIORITY
from awa_django.exceptions import InvalidDependency, InvalidEnqueueOption
from awa_django.snapshot import JobSnapshot
from awa_django.states import ParentFailurePolicy

MAX_KIND_CHARS = 200  # the kind column is varchar(200)
MAX_TAG_CHARS = 200  # each tags element is varchar(200)
MAX_TAGS = 20
# Parents of one child (decision 043): enough for a fan-in of 10,000; the enqueue locks
# each parent row FOR NO KEY UPDATE, so the bound also bounds that statement.
MAX_PARENTS = 10_000
# Job ids are bigints: a larger id names no job, and the driver cannot send it.
MAX_JOB_ID = 2**63 - 1


def check_kind(kind: object) -> str:
    """A kind is a non-empty string of at most 200 characters that PostgreSQL can store."""
    if not isinstance(kind, str) or not kind:
        raise InvalidEnqueueOption(
            f"kind must be a non-empty string such as 'send_receipt', got {kind!r:.100}"
        )
    if len(kind) > MAX_KIND_CHARS:
        raise InvalidEnqueueOption(
            f"kind {kind[:40]!r}... is {len(kind)} characters; the limit is {MAX_KIND_CHARS}: "
            "choose a shorter kind (@job(kind=...) or kind=)"
        )
    _check_text(kind, "kind")
    return kind


def check_priority(priority: object) -> int:
    if _whole(priority) and MIN_PRIORITY <= priority <= MAX_PRIORITY:
        return priority
    raise InvalidEnqueueOption(
        f"priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} "
        f"(1 urgent .. 4 batch is the usual scale), got {priority!r:.100}"
    )


def check_max_attempts(max_attempts: object) -> int:
    if _whole(max_attempts) and MIN_MAX_ATTEMPTS <= max_attempts <= MAX_MAX_ATTEMPTS:
        return max_attempts
    raise InvalidEnqueueOption(
        f"max_attempts must be a whole number from {MIN_MAX_ATTEMPTS} to {MAX_MAX_ATTEMPTS}, "
        f"got {max_attempts!r:.100}"
    )


def check_tags(tags: object) -> list[str]:
    """At most 20 tags, each a non-empty string of at most 200 characters."""
    if not isinstance(tags, list | tuple):
        raise InvalidEnqueueOption(
            f"tags must be a list of strings such as ['vip'], got {type(tags).__name__}"
        )
    if len(tags) > MAX_TAGS:
        raise InvalidEnqueueOption(f"at most {MAX_TAGS} tags per job, got {len(tags)}")
    for tag in tags:
        if not isinstance(tag, str) or not 0 < len(tag) <= MAX_TAG_CHARS:
            raise InvalidEnqueueOption(
                f"each tag must be a non-empty string of at most {MAX_TAG_CHARS} characters, "
                f"got {tag!r:.100}"
            )
        _check_text(tag, f"tag {tag!r:.60}")
    return list(tags)


def check_run_at(run_at: object) -> dt.datetime | None:
    if run_at is None:
        return None
    if not isinstance(run_at, dt.datetime) or run_at.tzinfo is None:
        raise InvalidEnqueueOption(
            "run_at must be a timezone-aware datetime, e.g. "
            f"django.utils.timezone.now() + timedelta(minutes=5), got {run_at!r:.100}"
        )
    try:
        # The row comes back in UTC: a time that does not exist there (year 0 or 10000)
        # would be written and then fail to load, so refuse it now.
        run_at.astimezone(dt.UTC)
    except OverflowError:
        raise InvalidEnqueueOption(f"run_at {run_at!r} is out of range in UTC") from None
    return run_at


def check_metadata(metadata: object) -> None:
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidEnqueueOption(
            f"metadata must be a dict of JSON values, got {type(metadata).__name__}"
        )


def _check_text(value: str, what: str) -> None:
    """PostgreSQL text holds no NUL, and UTF-8 cannot encode a lone surrogate."""
    if "\x00" in value:
        raise InvalidEnqueueOption(
            f"{what} contains a NUL character, which PostgreSQL cannot store: remove it"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEnqueueOption(
                f"{what} contains a lone surrogate, which is not valid Unicode text: it "
                "usually comes from decoding bytes with errors='surrogateescape'"
            ) from None


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def check_parents(after: object) -> tuple[int, ...]:
    """`after=`: 1 to MAX_PARENTS job ids (ints) or JobSnapshots; distinct ids, sorted (the
    order the enqueue locks them in)."""
    if isinstance(after, int | JobSnapshot) or not isinstance(after, list | tuple | set):
        raise InvalidDependency(
            f"after= takes a list of job ids or JobSnapshots, got {type(after).__name__}"
        )
    if not after or len(after) > MAX_PARENTS:
        raise InvalidDependency(f"after= takes 1 to {MAX_PARENTS:,} parents, got {len(after):,}")
    ids = set()
    for parent in after:
        if isinstance(parent, JobSnapshot):
            parent = parent.id
        if not _whole(parent) or not 0 < parent <= MAX_JOB_ID:
            raise InvalidDependency(
                f"after= takes job ids (positive ints) or JobSnapshots, got {parent!r:.100}"
            )
        ids.add(parent)
    return tuple(sorted(ids))


def check_parent_failure(policy: object) -> ParentFailurePolicy:
    """`on_parent_failure=`: 'cancel', 'run' or 'discard'."""
    if isinstance(policy, str) and policy in ParentFailurePolicy:
        return ParentFailurePolicy(policy)
    raise InvalidDependency(
        f"on_parent_failure must be 'cancel', 'run' or 'discard', got {policy!r:.100}"
    )
