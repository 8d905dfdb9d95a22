"""Admin list and dashboard timings on a table of 1,000,000 jobs (JSON lines on stdout).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/awa_admin_bench \\
        .venv/bin/python -m bench.admin_1m [--rows 1000000] [--runs 5] [--explain] [--reuse]

Drops and recreates the database named in DATABASE_URL (its name must contain "bench"),
migrates it, fills `awa_jobs_hot` with one `INSERT ... SELECT generate_series`, runs
VACUUM ANALYZE (as autovacuum would soon after a bulk load), then times admin pages with
Django's test client as a superuser. `--explain` prints EXPLAIN ANALYZE of each list page's
row query. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import psycopg

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/awa_admin_bench"

# 8 states with a realistic skew (most rows are retained completed jobs), 20 kinds, 5
# queues, ~1% tagged "vip", failed rows carry two error entries, args ~150 bytes.
FILL = """
INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt, max_attempts, run_at,
                          created_at, attempted_at, finalized_at, run_lease, errors, metadata,
                          tags, callback_id, attempted_by)
SELECT CASE WHEN g %% 10007 = 0 THEN 'rare_kind' ELSE 'kind_' || (g %% 20) END,
       (ARRAY['default', 'email', 'reports', 'billing', 'sync'])[1 + g %% 5],
       jsonb_build_object('order_id', g, 'email', 'customer' || g || '@example.com',
                          'note', repeat('x', 80)),
       s.state, 2, 1, 25, now() - (g %% 259200) * interval '1 second',
       now() - (g %% 259200) * interval '1 second', now(),
       CASE WHEN s.state IN ('completed', 'failed', 'cancelled')
            THEN now() - (g %% 259200) * interval '1 second' + interval '2 seconds' END, 1,
       CASE WHEN s.state = 'failed' THEN jsonb_build_array(
           jsonb_build_object('error', 'ConnectionError: upstream timed out', 'attempt', 1,
                              'at', now()),
           jsonb_build_object('error', 'ValueError: bad payload for order ' || g, 'attempt', 2,
                              'at', now()))
            ELSE '[]'::jsonb END,
       '{}'::jsonb,
       CASE WHEN g %% 97 = 0 THEN ARRAY['vip'] ELSE ARRAY[]::text[] END,
       CASE WHEN s.state = 'waiting_external' THEN gen_random_uuid() END,
       ARRAY[]::text[]
FROM generate_series(1, %(rows)s) AS g
CROSS JOIN LATERAL (SELECT CASE
    WHEN g %% 100 < 70 THEN 'completed' WHEN g %% 100 < 75 THEN 'failed'
    WHEN g %% 100 < 90 THEN 'available' WHEN g %% 100 < 93 THEN 'scheduled'
    WHEN g %% 100 < 95 THEN 'retryable' WHEN g %% 100 < 98 THEN 'cancelled'
    WHEN g %% 100 < 99 THEN 'running' ELSE 'waiting_external' END AS state) s
"""


def recreate(url: str) -> None:
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if "bench" not in name:
        raise SystemExit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    with psycopg.connect(url.replace(parts.path, "/postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def emit(**record: Any) -> None:
    print(json.dumps(record), flush=True)


def fill(rows: int) -> None:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"rows": rows})
    inserted = time.perf_counter() - started
    connection.ensure_connection()
    connection.connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE awa_jobs_hot")
    emit(
        step="fill",
        rows=rows,
        insert_s=round(inserted, 1),
        vacuum_analyze_s=round(time.perf_counter() - started - inserted, 1),
    )


def time_page(client: Any, label: str, url: str, runs: int) -> list[dict[str, Any]]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url)  # warm caches and plans
    samples = []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url)
            samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    emit(
        page=label,
        url=url,
        median_ms=round(statistics.median(samples), 1),
        min_ms=round(min(samples), 1),
        max_ms=round(max(samples), 1),
        queries=len(queries.captured_queries),
        slowest_query_ms=max(float(q["time"]) * 1000 for q in queries.captured_queries),
    )
    return queries.captured_queries


def explain(label: str, captured: list[dict[str, Any]]) -> None:

    rows_query = next(
        q["sql"]
        for q in captured
        if "ORDER BY" in q["sql"] and "COUNT(" not in q["sql"] and "awa_jobs_hot" in q["sql"]
    )
    explain_one(label, rows_query)


def explain_one(label: str, sql: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql)
        plan = "\n".join(r[0] for r in cursor.fetchall())
    print(f"\n-- {label}\n{sql}\n{plan}\n", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the database filled by an earlier run"
    )
    options = parser.parse_args()

    url = os.environ.setdefault("DATABASE_URL", DEFAULT_URL)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    if not options.reuse:
        recreate(url)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from awa_django.storage import figures as queues
    from awa_django.storage.models import Job

    if not options.reuse:
        call_command("migrate", verbosity=0)
        fill(options.rows)
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)

    some_id = Job.objects.order_by("id").values_list("id", flat=True)[options.rows // 2]
    callback = Job.objects.filter(callback_id__isnull=False).values_list("callback_id", flat=True)[
        0
    ]
    base = "/admin/awa_django/job/"
    pages = [
        ("unfiltered", base),
        ("unfiltered page 200", base + "?p=200"),
        ("state=failed", base + "?state__exact=failed"),
        ("state=running", base + "?state__exact=running"),
        ("kind=kind_3", base + "?kind=kind_3"),
        ("kind=rare_kind", base + "?kind=rare_kind"),
        ("queue=email", base + "?queue=email"),
        ("queue=email&state=available", base + "?queue=email&state__exact=available"),
        ("search id", base + f"?q={some_id}"),
        ("search callback id", base + f"?q={callback}"),
        ("search tag:vip", base + "?q=tag:vip"),
        ("search kind rare_kind", base + "?q=rare_kind"),
        ("detail", base + f"{some_id}/change/"),
        ("dashboard", base + "dashboard/"),
    ]
    for label, page_url in pages:
        captured = time_page(client, label, page_url, options.runs)
        if options.explain and label not in ("detail", "dashboard"):
            explain(label, captured)

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as stats_queries:
        started = time.perf_counter()
        queues.queue_stats()
        emit(step="queue_stats", ms=round((time.perf_counter() - started) * 1000, 1))
    if options.explain:
        for query in stats_queries.captured_queries:
            explain_one("queue_stats", query["sql"])


if __name__ == "__main__":
    main()
