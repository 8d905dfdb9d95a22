"""NOTIFY channel names (two per queue, always within PostgreSQL's 63-byte limit): the
queue's own, which carries the enqueue hints, and its role channel, which carries the waker
role's announcements (decision 025)."""

from __future__ import annotations

import hashlib

# Not "awa:cancel": every queue channel starts with "awa:", so a queue named "cancel" would
# collide with it. An underscore can never follow the "awa" of a queue channel.
CANCEL_CHANNEL = "awa_cancel"
_PREFIX = "awa:"
# A queue's role channel: "awa_role:" can never be the start of a queue's channel either.
_ROLE_PREFIX = "awa_role:"
# The role channel's one payload: the queue's waker could take no more work and gave its
# role up (every process then claims, and the first to go idle takes the role).
WAKER_VACANT = "vacant"
_LIMIT = 63  # NAMEDATALEN - 1: longer names are an error in pg_notify()


def channel_for(queue: str) -> str:
    """`awa:<queue>`, or `awa:<md5 of queue>` when that would not fit in 63 bytes."""
    return _named(_PREFIX, queue)


def role_channel_for(queue: str) -> str:
    """`awa_role:<queue>` (or its md5): where the queue's waker role is announced. Every
    worker process LISTENs here; only the role's holder LISTENs on `channel_for(queue)`."""
    return _named(_ROLE_PREFIX, queue)


def _named(prefix: str, queue: str) -> str:
    name = prefix + queue
    if len(name.encode()) <= _LIMIT:
        return name
    return prefix + hashlib.md5(queue.encode()).hexdigest()


def channel_sql(column: str) -> str:
    """The same naming rule as SQL over `column`, for statements that notify per queue."""
    return (
        f"CASE WHEN octet_length('{_PREFIX}' || {column}) <= {_LIMIT} "
        f"THEN '{_PREFIX}' || {column} ELSE '{_PREFIX}' || md5({column}) END"
    )
