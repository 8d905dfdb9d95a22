"""The benchmark's own database: recreate, migrate, reset between runs, observe progress.

Everything here runs on Django's connection (autocommit) except `recreate`, which has to
talk to the maintenance database `postgres` to drop and create the bench database.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connection

AWA_TABLES = (
    "awa_active_leases",
    "awa_jobs_hot",
    "awa_queue_state",
    "awa_worker_instances",
    "awa_leader_lease",
    "awa_dead_letters",
    "awa_bulk_operations",
    # Workflows (bench/workflows.py): edges, waiting children's counters, batches.
    "awa_job_dependencies",
    "awa_job_waits",
    "awa_batch_members",
    "awa_batches",
)


def conninfo(dbname: str | None = None) -> dict[str, Any]:
    """psycopg connection keywords for the bench database (or `dbname`)."""
    db = settings.DATABASES["default"]
    params = {
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "dbname": dbname or db["NAME"],
    }
    return {k: v for k, v in params.items() if v is not None}


def recreate() -> str:
    """Drop and create the bench database, then migrate it. Refuses names without "bench"
    because it drops the database."""
    name = settings.DATABASES["default"]["NAME"]
    if "bench" not in name:
        raise SystemExit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    with psycopg.connect(**conninfo("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    call_command("migrate", verbosity=0, interactive=False)
    return name


WRITES_TABLE = "bench_writes"


def reset() -> None:
    """Empty every awa table so each run starts from the same state."""
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(AWA_TABLES)} RESTART IDENTITY")
        # The row each *_write handler inserts (benchapp/jobs.py).
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {WRITES_TABLE} (job_id bigint NOT NULL)")
        cursor.execute(f"TRUNCATE {WRITES_TABLE}")


def written_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {WRITES_TABLE}")
        return int(cursor.fetchone()[0])


def analyze() -> None:
    # Fresh statistics after a bulk insert, as autovacuum would gather shortly anyway, so
    # the first claims do not depend on when autovacuum happens to wake up.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_jobs_hot")


# The queue of rows a scenario loads only to make the table deep (bench/deep.py): no worker
# serves it, and the figures of the jobs under test leave it out.
BALLAST = "deep-ballast"


def log(message: str) -> None:
    """Progress for the reader (stderr; stdout carries JSON lines only)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def lateness_seconds() -> list[float]:
    """Per claimed bench job: claim (attempted_at) minus its due time (metadata.due)."""
    return [late for _, late in lateness_by_due()]


def lateness_by_due() -> list[tuple[float, float]]:
    """(due epoch, lateness in seconds) of each claimed bench job, in due order."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (metadata->>'due')::float8,"
            " extract(epoch FROM attempted_at) - (metadata->>'due')::float8"
            " FROM awa_jobs_hot WHERE queue = 'bench' AND attempted_at IS NOT NULL"
            " ORDER BY 1"
        )
        return [(float(due), float(late)) for due, late in cursor.fetchall()]


def any_pending() -> bool:
    """Cheap progress probe. The newest job is claimed about last, so while it is unfinished
    a primary-key lookup answers; only then do the index heads get read. Reading the
    dispatch index's head 50 times a second would itself be slow while an old snapshot
    keeps the entries of claimed rows in it (the `pinned` scenarios), and would compete
    with the worker for the CPU."""
    with connection.cursor() as cursor:
        cursor.execute(_NEWEST_UNFINISHED)
        if cursor.fetchone()[0]:
            return True
        cursor.execute(_PENDING_PROBE)
        return bool(cursor.fetchone()[0])


_NEWEST_UNFINISHED = """
SELECT coalesce((SELECT state NOT IN ('completed', 'failed', 'cancelled') FROM awa_jobs_hot
                 ORDER BY id DESC LIMIT 1), false)
"""


_PENDING_PROBE = """
SELECT (SELECT id FROM awa_jobs_hot WHERE state = 'available' AND queue = 'bench'
        ORDER BY priority, run_at, id LIMIT 1) IS NOT NULL
    OR (SELECT id FROM awa_jobs_hot WHERE state = 'running'
        ORDER BY state, id DESC LIMIT 1) IS NOT NULL
    OR (SELECT id FROM awa_jobs_hot WHERE state IN ('scheduled', 'retryable')
        AND queue = 'bench' ORDER BY run_at LIMIT 1) IS NOT NULL
"""


def state_counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, count(*) FROM awa_jobs_hot WHERE queue <> %s GROUP BY state", [BALLAST]
        )
        return {state: count for state, count in cursor.fetchall()}


def dead_letter_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa_dead_letters")
        return int(cursor.fetchone()[0])


def completed_count(ids: list[int] | None = None) -> int:
    with connection.cursor() as cursor:
        if ids is None:
            cursor.execute("SELECT count(*) FROM awa_jobs_hot WHERE state = 'completed'")
        else:
            cursor.execute(
                "SELECT count(*) FROM awa_jobs_hot WHERE state = 'completed' AND id = ANY(%s)",
                [ids],
            )
        return int(cursor.fetchone()[0])


def completion_times() -> tuple[float, float]:
    """Epoch seconds (database clock) of the first and last completion."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM min(finalized_at)), extract(epoch FROM max(finalized_at))"
            " FROM awa_jobs_hot WHERE state = 'completed' AND queue <> %s",
            [BALLAST],
        )
        first, last = cursor.fetchone()
        return float(first), float(last)


def slice_rates(size: int) -> list[float]:
    """Completions per second of each consecutive `size` completions, in completion order
    (the first slice timed from the first completion): whether a drain slows as it goes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM finalized_at) FROM awa_jobs_hot"
            " WHERE state = 'completed' AND queue <> %s ORDER BY finalized_at",
            [BALLAST],
        )
        times = [float(r[0]) for r in cursor.fetchall()]
    ends = [times[end - 1] for end in range(size, len(times) + 1, size)]
    starts = [times[0], *ends]
    spans = zip(starts, ends, strict=False)
    return [round(size / max(end - start, 1e-9), 1) for start, end in spans]


def dead_tuples() -> int:
    """Dead row versions in awa_jobs_hot, as the statistics collector last counted them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'awa_jobs_hot'")
        row = cursor.fetchone()
        return int(row[0]) if row else 0


def claim_to_completion_seconds() -> list[float]:
    """Per job: claim commit (attempted_at) to completion commit (finalized_at)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM finalized_at - attempted_at) FROM awa_jobs_hot"
            " WHERE state = 'completed' AND queue <> %s",
            [BALLAST],
        )
        return [float(r[0]) for r in cursor.fetchall()]


def handler_start_times(ids: list[int]) -> dict[int, float]:
    """`result` of pickup probes: the epoch second their handler started."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, result FROM awa_jobs_hot WHERE id = ANY(%s) AND state = 'completed'",
            [ids],
        )
        return {int(i): float(r) for i, r in cursor.fetchall() if r is not None}


def dispatch_index_reads() -> tuple[int, int]:
    """(scans, index entries read) of the dispatch index so far: the claim statements and
    how many entries they had to step over (dead ones included)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idx_scan, idx_tup_read FROM pg_stat_user_indexes"
            " WHERE indexrelname = 'awa_jobs_dispatch_idx'"
        )
        row = cursor.fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)


def horizon_age() -> float:
    """Seconds the oldest other transaction in the cluster has been open (0 if none).

    Any open transaction, in any database of the cluster, keeps the rows our claims just
    superseded from being recognised as dead, so every claim re-reads them: a run taken
    while one is open is slower and not comparable."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(extract(epoch FROM max(now() - xact_start)), 0)"
            " FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            " AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)"
        )
        return round(float(cursor.fetchone()[0]), 1)


class Pin:
    """A transaction with an xid held open; `release()` ends it early."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def release(self) -> None:
        self.conn.rollback()


@contextmanager
def pinned_horizon() -> Iterator[Pin]:
    """Hold a transaction with an xid open, as a forgotten `idle in transaction` session or
    a long report would, so rows superseded meanwhile cannot be recognised as dead."""
    with psycopg.connect(**conninfo()) as conn:
        conn.execute("SELECT txid_current()")
        try:
            yield Pin(conn)
        finally:
            conn.rollback()


def wait_until(condition: Any, timeout: float, interval: float, what: str) -> float:
    """Poll `condition()` until true; returns time.time() when seen. Raises on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
