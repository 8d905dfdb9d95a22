"""Statements on the per-queue control rows a dispatcher reads: the global rate-limit
buckets (`awa_rate_buckets`) and the runtime overrides in `awa_queue_state`. Decision 017."""

from __future__ import annotations

from collections.abc import Sequence

from awa_django.storage import query
from awa_django.storage.query import Query
from awa_django.storage.sql import Statement

# Params: queue, wanted (tokens the dispatcher has slots for), rate (per second > 0), burst
# (>= 1). Returns (granted, tokens left). Index: awa_rate_buckets primary key; one row per
# queue, created full on first use. Takers from every worker process serialize on that row
# lock, each for one short autocommit statement, so granted tokens never exceed
# rate x t + burst across all of them. `granted` is stored only so RETURNING can report it
# (RETURNING sees the new row, and PostgreSQL < 18 has no OLD). Rate and burst come from
# the taker, so a runtime override applies from the next take without touching the row.
# The update is one sub-select so that the clock is read exactly once, after the row lock
# is granted (clock_timestamp(), not now(): a taker that waited behind another sees the
# time it really takes the tokens): the tokens subtracted, the tokens granted and the new
# refill time all come from that one reading. greatest() keeps a clock step backwards (or
# a taker older than the last) from minting any.
RATE_BUCKET_TAKE = Statement(
    "rate_bucket_take",
    """
INSERT INTO awa_rate_buckets AS b (queue, tokens, granted, refilled_at)
VALUES (%(queue)s, %(burst)s::float8 - least(%(wanted)s::int4, %(burst)s::int4),
        least(%(wanted)s::int4, %(burst)s::int4), clock_timestamp())
ON CONFLICT (queue) DO UPDATE
SET (tokens, granted, refilled_at) = (
    SELECT n.available - n.took, n.took, greatest(b.refilled_at, n.at)
    FROM (
        SELECT a.at, a.available, least(%(wanted)s::int4, floor(a.available)::int4) AS took
        FROM (
            SELECT c.at, least(%(burst)s::float8, b.tokens + %(rate)s::float8 *
                greatest(0, extract(epoch FROM c.at - b.refilled_at)::float8)) AS available
            FROM (SELECT clock_timestamp() AS at) AS c
        ) AS a
    ) AS n
)
RETURNING granted, tokens
""",
)


def rate_bucket_take(
    *, queue: str, wanted: int, rate: float, burst: int
) -> Query[tuple[int, float]]:
    """(tokens granted, tokens left) after taking up to `wanted` from the queue's bucket."""
    params = {"queue": queue, "wanted": wanted, "rate": rate, "burst": burst}
    return Query(RATE_BUCKET_TAKE, params, _grant)


def _grant(rows: query.Rows, count: int) -> tuple[int, float]:
    return int(rows[0][0]), float(rows[0][1])


# Params: queue, unused (tokens taken for a claim that found fewer jobs), burst. Index:
# awa_rate_buckets primary key. Runs only after a claim that came back short.
RATE_BUCKET_GIVE_BACK = Statement(
    "rate_bucket_give_back",
    """
UPDATE awa_rate_buckets SET tokens = least(%(burst)s::float8, tokens + %(unused)s::int4)
WHERE queue = %(queue)s
""",
    returns_rows=False,
)


def rate_bucket_give_back(*, queue: str, unused: int, burst: int) -> Query[int]:
    params = {"queue": queue, "unused": unused, "burst": burst}
    return Query(RATE_BUCKET_GIVE_BACK, params, query.rowcount)


# Params: queues text[] (the worker's). Index: awa_queue_state primary key. Each worker runs
# it once per OVERRIDE_REFRESH_INTERVAL (not per claim); returns only queues with an
# override: (queue, concurrency or NULL, rate or NULL, burst or NULL).
QUEUE_STATE_OVERRIDES = Statement(
    "queue_state_overrides",
    """
SELECT queue, concurrency_override, rate_override, burst_override
FROM awa_queue_state
WHERE queue = ANY(%(queues)s::varchar[])
  AND (concurrency_override IS NOT NULL OR rate_override IS NOT NULL)
""",
)


def queue_state_overrides(*, queues: Sequence[str]) -> Query[query.Rows]:
    return Query(QUEUE_STATE_OVERRIDES, {"queues": list(queues)}, query.plain)
