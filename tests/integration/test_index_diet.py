"""The index diet (decision 028): migration 0010 on a table with jobs in flight, a second
run after an interrupted one, and the plans of the queries the partial indexes serve
(the job list's filters, search and summary bar, the dashboard's depth, bulk chunks)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from awa_django.bulk import BulkAction, JobFilter
from awa_django.client import Client
from awa_django.storage import figures
from awa_django.storage.models import ActiveLease, Job, has_tag, in_queue
from awa_django.storage.sql import bulk as bulk_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql.bulk import Window
from tests.factories import JobFactory, old_schema_job
from tests.integration.sql_helpers import explain

Q = "diet-q"
BEFORE = ("awa_django", "0009_queue_rollups")
AFTER = ("awa_django", "0010_index_diet")
OLD = {"awa_jobs_queue_state_idx", "awa_jobs_state_id_idx", "awa_jobs_tags_idx"}
NEW = {"awa_jobs_queue_state_part_idx", "awa_jobs_state_id_part_idx", "awa_jobs_tags_part_idx"}
CHANGELIST = "admin:awa_django_job_changelist"


def job_indexes() -> dict[str, bool]:
    """{index name: valid} of every index on awa_jobs_hot."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = 'awa_jobs_hot'::regclass"
        )
        return dict(cursor.fetchall())


def migrate_to(target: tuple[str, str]) -> None:
    MigrationExecutor(connection).migrate([target])


@pytest.fixture
def at_0009() -> Iterator[None]:
    """The schema before this change; back to the latest afterwards, whatever happens."""
    migrate_to(BEFORE)
    try:
        yield
    finally:
        call_command("migrate", "awa_django", verbosity=0)


def in_flight() -> dict[str, Job]:
    """A job in each state of the common life and a few others, with and without tags."""
    jobs = {
        f"{state}{'_tagged' if tags else ''}": old_schema_job(Q, state, tags=tags)
        for state in ("available", "running", "completed", "failed", "scheduled")
        for tags in ([], ["vip", "batch-7"])
    }
    for name in ("running", "running_tagged"):
        job = jobs[name]
        ActiveLease.objects.create(job_id=job.pk, run_lease=job.run_lease, queue=Q, worker_id="w")
    return jobs


def rows() -> list[tuple[Any, ...]]:
    return sorted(Job.objects.values_list("id", "state", "queue", "tags", "run_lease"))


# -- the migration ------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("at_0009")
def test_the_migration_replaces_the_indexes_under_jobs_in_flight() -> None:
    jobs = in_flight()
    before = rows()
    assert set(job_indexes()) >= OLD and not NEW & set(job_indexes())

    migrate_to(AFTER)

    indexes = job_indexes()
    assert not OLD & set(indexes)
    assert all(indexes[name] for name in NEW), indexes
    assert rows() == before
    tagged = {jobs[name].pk for name in jobs if name.endswith("_tagged")}
    assert set(Job.objects.filter(has_tag("vip")).values_list("id", flat=True)) == tagged
    assert set(Job.objects.filter(in_queue(Q)).values_list("id", flat=True)) == {
        job.pk for job in jobs.values()
    }
    # What a bulk cancel of the tagged jobs would take: available, running and scheduled.
    assert Client().bulk_count(BulkAction.CANCEL, JobFilter(queue=Q, tags=("vip",))) == 3
    # The jobs in flight go on: the available ones are claimed and completed (by this
    # version's statements, which need the later migrations too: the claim reads 0011's
    # lease epochs).
    call_command("migrate", "awa_django", verbosity=0)
    claimed = jobs_sql.job_claim_many(
        lease_now=True, queue=Q, limit=10, worker_id="w", deadline_seconds=0
    ).run("default")
    assert {job.id for job in claimed} == {jobs["available"].pk, jobs["available_tagged"].pk}
    done = jobs_sql.job_complete_many(
        ids=[job.id for job in claimed],
        leases=[job.run_lease for job in claimed],
        results=[None] * len(claimed),
    ).run("default")
    assert {job.state for job in done} == {"completed"}
    assert Job.objects.filter(has_tag("vip"), state="completed").count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("at_0009")
def test_a_second_run_finishes_an_interrupted_upgrade() -> None:
    in_flight()
    before = rows()
    # What a run interrupted during its third build leaves behind: the first two indexes
    # built, the third INVALID (a failed CREATE INDEX CONCURRENTLY), the old ones still there.
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE INDEX awa_jobs_queue_state_part_idx ON awa_jobs_hot (queue, state) "
            "WHERE NOT state = 'available'"
        )
        cursor.execute(
            "CREATE INDEX awa_jobs_state_id_part_idx ON awa_jobs_hot (state, id) "
            "INCLUDE (queue) WHERE NOT state IN ('available', 'completed')"
        )
        cursor.execute("CREATE INDEX awa_jobs_tags_part_idx ON awa_jobs_hot USING gin (tags)")
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false "
            "WHERE indexrelid = 'awa_jobs_tags_part_idx'::regclass"
        )

    migrate_to(AFTER)

    indexes = job_indexes()
    assert not OLD & set(indexes) and all(indexes[name] for name in NEW), indexes
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_indexdef('awa_jobs_tags_part_idx'::regclass)")
        (definition,) = cursor.fetchone()
    assert "WHERE (NOT (tags = " in definition, definition  # rebuilt as the model says
    assert rows() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("at_0009")
def test_the_migration_reverses() -> None:
    migrate_to(AFTER)
    migrate_to(BEFORE)
    indexes = job_indexes()
    assert all(indexes[name] for name in OLD) and not NEW & set(indexes)


# -- plans at scale -----------------------------------------------------------------------
@pytest.fixture
def deep_table(transactional_db: None) -> None:
    """30,000 jobs as a retained history looks: mostly completed, 500 in each other state
    (running ones with a lease), every 100th tagged, a rare kind and a rare queue; vacuumed
    as autovacuum would have (an index-only scan needs the visibility map)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt,
                max_attempts, run_at, created_at, finalized_at, run_lease, errors, metadata,
                tags, attempted_by, callback_id, callback_timeout_at)
            SELECT CASE WHEN g % 1000 = 7 THEN 'diet_rare' ELSE 'diet_' || (g % 10) END,
                   CASE WHEN g % 1000 = 11 THEN 'diet-rare' ELSE 'diet-' || (g % 4) END,
                   '{}', s.state, 2, 1, 25, now(), now(),
                   CASE WHEN s.state IN ('completed', 'failed', 'cancelled') THEN now() END,
                   1, '[]', '{}',
                   CASE WHEN g % 100 = 0 THEN ARRAY['vip'] ELSE '{}' END, '{}',
                   CASE WHEN s.state = 'waiting_external' THEN gen_random_uuid() END,
                   CASE WHEN s.state = 'waiting_external' THEN now() END
            FROM generate_series(1, 30000) g,
                 LATERAL (SELECT CASE g % 60 WHEN 0 THEN 'available' WHEN 1 THEN 'scheduled'
                                  WHEN 2 THEN 'retryable' WHEN 3 THEN 'waiting_external'
                                  WHEN 4 THEN 'failed' WHEN 5 THEN 'running'
                                  WHEN 6 THEN 'cancelled' ELSE 'completed' END AS state) s
            """
        )
        cursor.execute(
            "INSERT INTO awa_active_leases (job_id, run_lease, queue, worker_id) "
            "SELECT id, run_lease, queue, 'w' FROM awa_jobs_hot WHERE state = 'running'"
        )
        cursor.execute("VACUUM ANALYZE awa_jobs_hot")


def plan_of(sql: str, params: Any = None) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(line for (line,) in cursor.fetchall())


def queryset_plan(queryset: Any) -> str:
    sql, params = queryset.query.sql_with_params()
    return plan_of(sql, params)


@pytest.mark.usefixtures("deep_table")
def test_a_tag_filter_reads_the_partial_tags_index() -> None:
    plan = queryset_plan(Job.objects.filter(has_tag("vip")).order_by("-id")[:50])
    assert "awa_jobs_tags_part_idx" in plan, plan


@pytest.mark.usefixtures("deep_table")
def test_a_bulk_chunk_with_tags_reads_the_partial_tags_index() -> None:
    window = Window(JobFilter(tags=("vip",)), ("failed",), 0, 1000)
    plan = explain(bulk_sql.job_bulk_discard, window=window)
    assert "awa_jobs_tags_part_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan, plan


@pytest.mark.usefixtures("deep_table")
@pytest.mark.parametrize("states", [("available",), ("failed",), ("available", "running")])
def test_a_bulk_chunk_of_a_small_queue_reads_an_index_in_every_state(states: Any) -> None:
    window = Window(JobFilter(queue="diet-rare"), states, 0, 1000)
    plan = explain(bulk_sql.job_bulk_cancel, window=window)
    assert "Seq Scan on awa_jobs_hot" not in plan, plan
    assert re.search(r"awa_jobs_(dispatch|queue_state_part)_idx", plan), plan


# The list's filters that used an index before the change, with the index that serves the
# page's rows now (a small result is found through it and sorted; a large one is read
# backwards along the primary key, stopping after a page).
LIST_PLANS = [
    ({"state__exact": "failed"}, "awa_jobs_state_id_part_idx"),
    ({"state__exact": "running"}, "awa_jobs_state_id_part_idx"),
    ({"state__exact": "waiting_external"}, "awa_jobs_(state_id_part|cb_timeout)_idx"),
    ({"kind": "diet_rare"}, "awa_jobs_kind_state_idx"),
    ({"queue": "diet-rare"}, "awa_jobs_queue_state_part_idx"),
    ({"queue": "diet-rare"}, "awa_jobs_dispatch_idx"),  # its available jobs
    ({"queue": "diet-rare", "state__exact": "available"}, "awa_jobs_dispatch_idx"),
    ({"queue": "diet-rare", "state__exact": "failed"}, "awa_jobs_queue_state_part_idx"),
    ({"q": "tag:vip"}, "awa_jobs_tags_part_idx"),
    ({"q": "queue:diet-rare"}, "awa_jobs_queue_state_part_idx"),
    ({"q": "diet_rare"}, "awa_jobs_kind_state_idx"),
]


@pytest.mark.usefixtures("deep_table")
@pytest.mark.parametrize(("query", "index"), LIST_PLANS)
def test_the_job_list_finds_its_rows_through_an_index(
    admin_client: Any, query: dict[str, str], index: str
) -> None:
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse(CHANGELIST), query)
    assert response.status_code == 200
    page = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT")]
    rows_query = next(sql for sql in page if '"awa_jobs_hot"."max_attempts"' in sql)
    assert re.search(index, plan_of(rows_query)), plan_of(rows_query)
    for sql in page:
        if '"awa_jobs_hot"' in sql:
            assert "Seq Scan on awa_jobs_hot" not in plan_of(sql), (sql, plan_of(sql))


def job_scans(sql: str) -> list[tuple[str, str, int]]:
    """(node type, index name, rows it returned) of every scan of awa_jobs_hot that running
    `sql` does (EXPLAIN ANALYZE): what the plan reads, whichever index a planner picks."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        ((document,),) = cursor.fetchall()
    found: list[tuple[str, str, int]] = []

    def walk(node: dict[str, Any]) -> None:
        if node.get("Relation Name") == "awa_jobs_hot":
            rows = int(node["Actual Rows"] * node["Actual Loops"])
            found.append((node["Node Type"], node.get("Index Name", ""), rows))
        for child in node.get("Plans", []):
            walk(child)

    walk(document[0]["Plan"])
    return found


# deep_table's jobs that are not completed: the only rows these figures need to read.
LIVE_JOBS = 30000 // 60 * 7


def assert_reads_only_live_jobs_from_indexes(sql: str) -> None:
    """Each scan of the jobs is an index-only scan of one of awa's indexes and returns at
    most the live jobs, never the 26,500 completed ones. PostgreSQL 15 and 18 pick different
    partial indexes for the same query (18 skip-scans (queue, state)), both within this."""
    scans = job_scans(sql)
    assert scans, sql
    for node, index, rows in scans:
        assert node == "Index Only Scan" and index.startswith("awa_jobs_"), (scans, sql)
        assert rows <= LIVE_JOBS, (scans, sql)


@pytest.mark.usefixtures("deep_table")
def test_the_summary_bar_and_the_depth_read_indexes_only() -> None:
    with CaptureQueriesContext(connection) as bar:
        Client().state_counts()
    with CaptureQueriesContext(connection) as stats:
        figures.queue_stats()
    (counts,) = [q["sql"] for q in bar.captured_queries]
    assert_reads_only_live_jobs_from_indexes(counts)
    depth = [q["sql"] for q in stats.captured_queries if '"awa_jobs_hot"' in q["sql"]]
    assert len(depth) == 3, depth  # the others' depth, throughput, available depth and lag
    others, throughput, available = depth
    assert_reads_only_live_jobs_from_indexes(others)
    assert_reads_only_live_jobs_from_indexes(available)
    # Throughput counts recent completions: an index, never the whole table.
    assert all(node != "Seq Scan" for node, _, _ in job_scans(throughput)), job_scans(throughput)


@pytest.mark.usefixtures("deep_table")
def test_the_split_counts_add_up_to_the_whole() -> None:
    live = Job.objects.exclude(state="completed").order_by()
    by_state = dict(live.values_list("state").annotate(n=Count("*")))
    assert Client().state_counts() == by_state
    depth = {s.queue: s.depth for s in figures.queue_stats() if s.depth}
    expected: dict[str, dict[str, int]] = {}
    for queue, state, n in live.values_list("queue", "state").annotate(n=Count("*")):
        expected.setdefault(queue, {})[state] = n
    assert depth == expected


@pytest.mark.django_db
def test_the_summary_bar_leaves_out_states_without_jobs() -> None:
    assert Client().state_counts() == {}
    JobFactory(state="failed")
    JobFactory(state="completed")
    assert Client().state_counts() == {"failed": 1}
    JobFactory.create_batch(2, state="available")
    assert Client().state_counts() == {"failed": 1, "available": 2}
