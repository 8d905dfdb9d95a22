"""job_claim_many with a worker's kinds (decision 032): it takes the kinds the worker has, the
import paths it may resolve, and any kind once its job has waited out the grace; its plan
stays on the dispatch index and is generic from the fifth claim on, with a floor or none."""

from __future__ import annotations

import datetime as dt
from typing import Any

import factory
import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from awa_django.storage.sql import jobs as jobs_sql
from awa_django.worker.database import Database
from awa_django.worker.handled_kinds import HandledKinds
from tests.factories import JobFactory as BaseJobFactory
from tests.integration.test_claim_floor import Q as BACKLOG_Q
from tests.integration.test_claim_floor import fill_backlog

pytestmark = pytest.mark.django_db
Q = "core-kinds"


class JobFactory(BaseJobFactory):
    queue = Q
    run_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(seconds=1))


def kinds(
    known: tuple[str, ...] = ("has_it",),
    *,
    dotted: bool = False,
    refused: tuple[str, ...] = (),
    grace: float = 60.0,
) -> jobs_sql.ClaimKinds:
    return jobs_sql.ClaimKinds(known, dotted, refused, grace)


def claimed_kinds(claim_kinds: jobs_sql.ClaimKinds | None) -> list[str]:
    rows = jobs_sql.job_claim_many(
        queue=Q,
        limit=100,
        worker_id="w-kinds",
        deadline_seconds=0,
        lease_now=False,
        kinds=claim_kinds,
    ).run("default")
    return sorted(row.kind for row in rows)


def test_a_claim_takes_only_the_kinds_the_worker_has() -> None:
    for kind in ("has_it", "lacks_it", "has_it", "app.tasks.path"):
        JobFactory(kind=kind)
    assert claimed_kinds(kinds()) == ["has_it", "has_it"]
    assert claimed_kinds(None) == ["app.tasks.path", "lacks_it"]


def test_import_paths_are_claimed_by_a_resolving_worker_except_those_it_refused() -> None:
    for kind in ("app.tasks.one", "app.tasks.two", "lacks_it"):
        JobFactory(kind=kind)
    assert claimed_kinds(kinds(dotted=True, refused=("app.tasks.two",))) == ["app.tasks.one"]
    assert claimed_kinds(kinds(dotted=True)) == ["app.tasks.two"]


def test_a_kind_the_worker_lacks_is_claimed_once_its_job_waited_out_the_grace() -> None:
    JobFactory(kind="nobody_has", run_at=timezone.now() - dt.timedelta(seconds=120))
    JobFactory(kind="recent_unknown")
    assert claimed_kinds(kinds()) == ["nobody_has"]  # taken, to fail (plan_unknown_kind)


def test_kinds_with_quotes_and_percent_signs_stay_data() -> None:
    odd = "it's 100%_{odd},\"kind\\"
    JobFactory(kind=odd)
    JobFactory(kind="plain")
    assert claimed_kinds(kinds((odd,))) == [odd]


def test_a_grace_of_zero_claims_every_kind() -> None:
    handled = HandledKinds(grace=0.0)
    assert handled.claim_kinds() is None and handled.signature == ""
    handled.refuse("app.tasks.x")
    assert handled.claim_kinds() is None


def test_a_worker_refuses_only_import_paths_and_its_signature_names_its_kinds() -> None:
    handled = HandledKinds(grace=60.0)
    first = handled.claim_kinds()
    assert first is not None and "acc_noop" in first.known
    signature = handled.signature
    handled.refuse("acc_unknown")  # a listed kind is failed when overdue, never refused
    handled.refuse("app.tasks.gone")
    again = handled.claim_kinds()
    assert again is not None and again.refused == ("app.tasks.gone",)
    assert handled.signature == signature != ""


def explain(claim: jobs_sql.ClaimKinds, after: Any = None) -> str:
    query = jobs_sql.job_claim_many(
        queue=BACKLOG_Q,
        limit=10,
        worker_id="w",
        deadline_seconds=0,
        lease_now=False,
        after=after,
        kinds=claim,
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + query.statement.sql, query.params)
        return "\n".join(line for (line,) in cursor.fetchall())


@pytest.mark.parametrize("after", [None, (2, "2020-01-01T00:00:00+00:00", 0)])
def test_the_kinds_are_a_filter_on_the_dispatch_index_scan(after: Any) -> None:
    fill_backlog(20000)
    plan = explain(kinds(tuple(f"kind_{n}" for n in range(40)), dotted=True), after)
    assert "awa_jobs_dispatch_idx" in plan, plan
    assert "Seq Scan on awa_jobs_hot" not in plan and "Hash Join" not in plan, plan
    # Written in as a constant: hashed once per plan, not searched per row.
    assert "ANY ('{kind_0," in plan, plan


@pytest.mark.parametrize("after", [None, (2, "2020-01-01T00:00:00+00:00", 0)])
@pytest.mark.parametrize("limit", [3, 10])
def test_a_claim_with_kinds_is_planned_once_per_connection(after: Any, limit: int) -> None:
    """A generic plan from the fifth claim on, with a floor or none: a sub-select in the
    filter (an earlier design) made PostgreSQL re-plan every claim from a floor."""
    db = Database("default", "awa-test-plan", max_size=1)
    claim = jobs_sql.job_claim_many(
        lease_now=False,
        queue=BACKLOG_Q,
        limit=limit,
        worker_id="w-plan",
        deadline_seconds=0,
        after=after,
        kinds=kinds(dotted=True, refused=("app.tasks.gone",)),
    )
    with psycopg.connect(**db.kwargs) as conn:
        conn.execute(
            """INSERT INTO awa_jobs_hot (kind, queue, args, state, priority, attempt,
                   max_attempts, run_at, created_at, run_lease, errors, metadata, tags,
                   attempted_by)
               SELECT 'has_it', %s, '{}', 'available', 2, 0, 25, now(), now(), 0, '[]',
                      '{}', '{}', '{}'
               FROM generate_series(1, 5000) g""",
            [BACKLOG_Q],
        )
        conn.execute("ANALYZE awa_jobs_hot")
        for _ in range(20):  # psycopg prepares at the 5th; PostgreSQL decides after 5 more
            conn.execute("BEGIN")
            claim.run_on(conn)
            conn.execute("ROLLBACK")
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE '%%candidates AS (%%'"
        ).fetchall()
        conn.execute("DELETE FROM awa_jobs_hot WHERE queue = %s", [BACKLOG_Q])
    assert len(plans) == 1 and plans[0] == (10, 5), plans
