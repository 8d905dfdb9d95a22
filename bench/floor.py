"""The floor: a minimal hand-written claim-100/complete-100 loop in psycopg (`floor`), and
the same loop ten at a time (`floor_10`: the batches of a worker of concurrency 10); and
the worker's own statements in a bare loop (`floor_statements`).

It runs on a scratch copy of `awa_jobs_hot` (same columns and indexes) so it shows what
this PostgreSQL can do at best with the same row shape, with none of the queue's
guarantees (no leases, no run_lease guard on completion, no events).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import psycopg

from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.database import take_lease_epoch

from .database import conninfo

TABLE = "bench_floor_jobs"

_CREATE = f"""
DROP TABLE IF EXISTS {TABLE};
CREATE TABLE {TABLE} (LIKE awa_jobs_hot INCLUDING ALL);
"""


def _fill(table: str) -> str:
    """`n` available no-op jobs of queue `bench` into `table` (awa_jobs_hot or its copy)."""
    return f"""
INSERT INTO {table} (kind, queue, args, state, priority, attempt, max_attempts, run_at,
                     created_at, run_lease, errors, metadata, tags, attempted_by)
SELECT 'bench_async', 'bench', jsonb_build_object('n', g), 'available', 2, 0, 25, now(),
       now(), 0, '[]', '{{}}', '{{}}', '{{}}'
FROM generate_series(1, %(n)s) g
"""


def _claim(batch: int) -> str:
    """Same candidate order and partial index as the real claim (awa_jobs_dispatch_idx
    copy), `batch` rows at a time."""
    return f"""
UPDATE {TABLE} SET state = 'running', attempt = attempt + 1, run_lease = run_lease + 1,
                   attempted_at = now()
WHERE id IN (SELECT id FROM {TABLE}
             WHERE state = 'available' AND queue = 'bench' AND run_at <= now()
             ORDER BY priority, run_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED)
RETURNING id
"""


_COMPLETE = f"""
UPDATE {TABLE} SET state = 'completed', finalized_at = now() WHERE id = ANY(%(ids)s)
"""


def run_floor(n: int, batch: int = 100) -> dict[str, Any]:
    """Claim and complete `n` pre-inserted rows, `batch` at a time, on one connection."""
    with psycopg.connect(**conninfo(), autocommit=True) as conn:
        _prepare(conn, n)
        began = time.perf_counter()
        done = _drain(conn, _claim(batch))
        elapsed = time.perf_counter() - began
        conn.execute(f"DROP TABLE {TABLE}")
    return _rate("floor loop", n, done, batch, elapsed)


def _rate(loop: str, n: int, done: int, batch: int, elapsed: float) -> dict[str, Any]:
    """A floor's line: all `n` rows or an error."""
    if done != n:
        raise RuntimeError(f"{loop} completed {done} of {n} rows")
    return {
        "jobs": n,
        "batch": batch,
        "jobs_per_s": round(n / elapsed, 1),
        "elapsed_s": round(elapsed, 3),
    }


def _prepare(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute(_CREATE)
    conn.execute(_fill(TABLE), {"n": n})
    conn.execute(f"ANALYZE {TABLE}")


def _drain(conn: psycopg.Connection[Any], claim: str) -> int:
    done = 0
    while True:
        ids = [row[0] for row in conn.execute(claim, prepare=True).fetchall()]
        if not ids:
            return done
        conn.execute(_COMPLETE, {"ids": ids}, prepare=True)
        done += len(ids)


# -- enqueue floors: the same rows written by hand, for comparison with (b) ---------------
_INSERT_ONE = """
INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts, run_at,
                          created_at, run_lease, errors, metadata, tags, attempted_by)
VALUES ('bench_async', 'bench', %(args)s::jsonb, 'available', 2, 0, 25, now(), now(), 0,
        '[]', '{}', '{}', '{}')
RETURNING id
"""
_COPY = """
COPY awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts, run_at,
                   created_at, run_lease, errors, metadata, tags, attempted_by) FROM STDIN
"""


def run_enqueue_floor(n_one: int, n_many: int) -> dict[str, Any]:
    """Prepared single-row INSERTs in autocommit, and one COPY of `n_many` rows."""
    with psycopg.connect(**conninfo(), autocommit=True) as conn:
        began = time.perf_counter()
        for i in range(n_one):
            conn.execute(_INSERT_ONE, {"args": f'{{"n": {i}}}'}, prepare=True).fetchone()
        one = time.perf_counter() - began
        began = time.perf_counter()
        with conn.transaction(), conn.cursor().copy(_COPY) as copy:
            now = dt.datetime.now(dt.UTC)
            for i in range(n_many):
                row = ("bench_async", "bench", f'{{"n": {i}}}', "available", 2, 0, 25)
                copy.write_row((*row, now, now, 0, "[]", "{}", [], []))
        many = time.perf_counter() - began
    return {
        "jobs": n_one,
        "jobs_per_s": round(n_one / one, 1),
        "copy_jobs": n_many,
        "copy_jobs_per_s": round(n_many / many, 1),
    }


# -- the worker's own statements, without the worker ---------------------------------------


def run_statement_floor(n: int, batch: int = 10) -> dict[str, Any]:
    """Drain `n` rows of awa_jobs_hot with the worker's own claim and lean completion, their
    rows decoded as the worker decodes them, each batch's completion on a second connection
    while the next claim runs, as the worker overlaps them; the claim's connection holds a
    lease epoch, as a worker's does. No dispatcher, executor, events or pool: what the
    statements alone allow, to read the worker's drain against."""
    with psycopg.connect(**conninfo(), autocommit=True) as conn:
        conn.execute(_fill("awa_jobs_hot"), {"n": n})
        conn.execute("VACUUM ANALYZE awa_jobs_hot")
    return asyncio.run(_drain_statements(n, batch))


async def _drain_statements(n: int, batch: int) -> dict[str, Any]:
    claims = await psycopg.AsyncConnection.connect(**conninfo(), autocommit=True)
    completions = await psycopg.AsyncConnection.connect(**conninfo(), autocommit=True)
    await take_lease_epoch(claims)
    done = 0
    flushing: asyncio.Future[dict[int, dt.datetime]] | None = None
    began = time.perf_counter()
    try:
        while True:
            rows = await jobs_sql.job_claim_many(
                queue="bench", limit=batch, worker_id="floor", deadline_seconds=0, lease_now=False
            ).arun(claims)
            if flushing is not None:
                done += len(await flushing)
            if not rows:
                break
            rows.sort(key=lambda row: row.id)
            lean = jobs_sql.job_complete_many_lean(
                ids=[row.id for row in rows],
                leases=[row.run_lease for row in rows],
                results=[None] * len(rows),
            )
            flushing = asyncio.ensure_future(lean.arun(completions))
        elapsed = time.perf_counter() - began
    finally:
        await claims.close()
        await completions.close()
    return _rate("statement floor", n, done, batch, elapsed)
