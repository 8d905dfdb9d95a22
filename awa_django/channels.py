"""NOTIFY channel names (one per queue, always within PostgreSQL's 63-byte limit) and the
one payload a queue's channel carries besides the empty enqueue hint."""

from __future__ import annotations

import hashlib

# Not "awa:cancel": every queue channel starts with "awa:", so a queue named "cancel" would
# collide with it. An underscore can never follow the "awa" of a queue channel.
CANCEL_CHANNEL = "awa_cancel"
_PREFIX = "awa:"
# The payload of the one NOTIFY a worker itself sends on a queue's channel: the queue's
# waker could take no more work and gave its role up (decision 025). Enqueue hints carry
# no payload, so the two never mix up.
WAKER_VACANT = "vacant"
# ... and the one that says a process has taken the role again: until it arrives (or for
# VACANT_GRACE at most) every process acts on the enqueues' hints.
WAKER_TAKEN = "taken"
_LIMIT = 63  # NAMEDATALEN - 1: longer names are an error in pg_notify()


def channel_for(queue: str) -> str:
    """`awa:<queue>`, or `awa:<md5 of queue>` when that would not fit in 63 bytes."""
    name = _PREFIX + queue
    if len(name.encode()) <= _LIMIT:
        return name
    return _PREFIX + hashlib.md5(queue.encode()).hexdigest()


def channel_sql(column: str) -> str:
    """The same naming rule as SQL over `column`, for statements that notify per queue."""
    return (
        f"CASE WHEN octet_length('{_PREFIX}' || {column}) <= {_LIMIT} "
        f"THEN '{_PREFIX}' || {column} ELSE '{_PREFIX}' || md5({column}) END"
    )
