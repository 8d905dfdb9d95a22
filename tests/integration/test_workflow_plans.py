"""The workflow trigger functions keep their settings and their key probes (decision 043,
"Cost"; migrations 0016 and 0018).

The settings live on the functions, so a later CREATE OR REPLACE that forgets its SET
clauses drops them without any other symptom than slower flows: the first test is the
alarm. The others read the plans PostgreSQL actually runs inside the functions
(auto_explain of the nested statements): under statistics that say the tables are empty
(freshly truncated, or analyzed while empty) and under real ones, a child's link and its
parent's completion reach jobs and counters by primary key only, never by the state
index or a scan, whose cost would grow with every job waiting (issue 29).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection

import awa_django
from awa_django.execution.context import JobContext
from awa_django.storage.models import Job
from awa_django.storage.sql import workflows as workflows_sql

pytestmark = pytest.mark.django_db

FUNCTIONS = {
    "awa_workflow_parent_ended": ["plan_cache_mode=force_generic_plan", "enable_seqscan=off"],
    "awa_workflow_settle": ["plan_cache_mode=force_generic_plan", "enable_seqscan=off"],
    "awa_workflow_link": ["enable_seqscan=off"],
}
# The tables a link and a completion read by key, and the only index each may use.
KEYS = {"awa_jobs_hot": "awa_jobs_hot_pkey", "awa_job_waits": "awa_job_waits_pkey"}
TABLES = ("awa_jobs_hot", "awa_job_waits", "awa_job_dependencies")
WAITING = 300  # children already waiting (on other parents) when the plans are read


@dataclass
class PlanStep:
    n: int


@awa_django.job(PlanStep, queue="wf-plans")
def plan_step(job: JobContext[PlanStep]) -> None:
    return None


def function_settings(name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = %s", [name])
        rows = cursor.fetchall()
    assert len(rows) == 1, f"{name}: expected one function, found {len(rows)}"
    return list(rows[0][0])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_workflow_function_keeps_its_settings(name: str) -> None:
    assert function_settings(name) == FUNCTIONS[name]


def execute(sql: str, params: Any = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def nested_plans(run: Callable[[], object]) -> list[dict[str, Any]]:
    """The plans (EXPLAIN ANALYZE, JSON) of the statements that `run` executes inside
    functions and triggers, as auto_explain logs them. Settings are SET LOCAL: the test's
    rollback turns auto_explain off again."""
    messages: list[str] = []
    raw = connection.connection

    def heard(diagnostic: Any) -> None:
        messages.append(diagnostic.message_primary or "")

    execute("LOAD 'auto_explain'")
    execute(
        "SET LOCAL auto_explain.log_min_duration = 0;"
        " SET LOCAL auto_explain.log_nested_statements = on;"
        " SET LOCAL auto_explain.log_analyze = on;"
        " SET LOCAL auto_explain.log_format = json;"
        " SET LOCAL client_min_messages = log"
    )
    raw.add_notice_handler(heard)
    try:
        run()
    finally:
        execute(
            "SET LOCAL auto_explain.log_min_duration = -1; SET LOCAL client_min_messages = notice"
        )
        raw.remove_notice_handler(heard)
    plans = [json.loads(m.split("plan:", 1)[1]) for m in messages if "plan:" in m]
    assert plans, messages
    return plans


def scans(plan: dict[str, Any]) -> Iterator[tuple[str, str, str, int]]:
    """(relation, node type, index, rows returned) of each scan of a table in `plan` (not
    the nodes that write); a bitmap heap scan names the index of the bitmap index scan
    beneath it."""

    def walk(node: dict[str, Any]) -> Iterator[tuple[str, str, str, int]]:
        children = node.get("Plans", [])
        if "Relation Name" in node and node["Node Type"].endswith("Scan"):
            indexes = [c.get("Index Name", "") for c in children if "Index Name" in c]
            index = node.get("Index Name") or ",".join(indexes)
            rows = int(node["Actual Rows"] * node["Actual Loops"])
            yield node["Relation Name"], node["Node Type"], index, rows
        for child in children:
            yield from walk(child)

    yield from walk(plan["Plan"])


def key_scans(plans: list[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    """Every scan of the keyed tables in the nested statements. The last plan logged is
    the statement the test ran itself (it ends after the statements nested in it), which
    PostgreSQL plans afresh with its values: left out."""
    return [scan for plan in plans[:-1] for scan in scans(plan) if scan[0] in KEYS]


def assert_by_key(found: list[tuple[str, str, str, int]], most: int) -> None:
    assert found
    for relation, node, index, rows in found:
        assert node != "Seq Scan" and index == KEYS[relation], found
        assert rows <= most, found


def waiting_children(count: int, like: int) -> None:
    """`count` jobs waiting on a parent (which does not matter here), copies of job `like`
    inserted as such: no row version of this transaction is dead, so the ANALYZE of the
    `analyzed` case reports no dead rows that the reclaimer's tests would then count."""
    execute(
        "INSERT INTO awa_jobs_hot"
        " SELECT (jsonb_populate_record(j, jsonb_build_object("
        "   'id', nextval(pg_get_serial_sequence('awa_jobs_hot', 'id')),"
        "   'state', 'waiting_parents', 'has_parents', true))).*"
        " FROM awa_jobs_hot j, generate_series(1, %(count)s) WHERE j.id = %(like)s;"
        " INSERT INTO awa_job_waits (job_id, pending_parents, failed_parents,"
        "   on_parent_failure, cancelled_by_parents)"
        " SELECT id, 1, 0, 'cancel', false FROM awa_jobs_hot"
        " WHERE state = 'waiting_parents' AND id > %(like)s"
        " ON CONFLICT (job_id) DO NOTHING",
        {"count": count, "like": like},
    )


COMPLETE = "UPDATE awa_jobs_hot SET state = 'completed', finalized_at = now() WHERE id = %s"


@pytest.mark.parametrize("statistics", ["truncated", "analyzed empty", "analyzed"])
def test_link_and_completion_read_jobs_by_primary_key(statistics: str) -> None:
    # A new relfilenode (size unknown, "-1") and no column statistics left by an earlier
    # test: the tables as a new database has them. ANALYZE's figures land on the new
    # relfilenode, so the rollback takes them all away. Each invalidates the functions'
    # cached plans.
    execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")
    execute("DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])", [list(TABLES)])
    if statistics == "analyzed empty":
        execute(f"ANALYZE {', '.join(TABLES)}")
    parent = awa_django.enqueue(PlanStep(-1))
    # The first link plans the functions' statements from the statistics of the moment.
    awa_django.enqueue(PlanStep(-2), after=[parent])
    waiting_children(WAITING, like=parent.id)
    if statistics == "analyzed":
        execute(f"ANALYZE {', '.join(TABLES)}")
    child = awa_django.enqueue(PlanStep(-3)).id
    execute("UPDATE awa_jobs_hot SET state = 'waiting_parents' WHERE id = %s", [child])
    link = workflows_sql.job_link_parents(child=child, parents={parent.id: None}, policy="cancel")

    assert_by_key(key_scans(nested_plans(lambda: link.run("default"))), most=1)
    completion = nested_plans(lambda: execute(COMPLETE, [parent.id]))
    assert_by_key(key_scans(completion), most=2)  # its two children
    assert Job.objects.get(id=child).state == "available"
