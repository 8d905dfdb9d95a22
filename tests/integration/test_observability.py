"""The leader's per-minute rollups and live queue figures (storage/sql/rollups.py), the
history figures the Client reads, `awa_status --check`, and the dashboard's history
fragment and the job list's summary bar — against real PostgreSQL (decision 021)."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from awa_django.client import Client
from awa_django.storage.models import Job, QueueRollup
from awa_django.storage.sql import rollups as rollups_sql
from awa_django.worker.database import Database
from awa_django.worker.maintenance.depth import QueueDepth
from awa_django.worker.maintenance.rollup import Rollup
from awa_django.worker.metrics import WorkerMetrics
from tests.factories import DeadLetterFactory, JobFactory
from tests.runtime_db import with_db

Q = "obs"


def db_minute(offset: int) -> dt.datetime:
    """The start of the database clock's current minute plus `offset` minutes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('minute', now()) + make_interval(mins => %s)", [offset])
        return cursor.fetchone()[0]


def finalized(state: str, at: dt.datetime, wait: float, run: float, attempt: int = 1) -> Job:
    """A job of queue `obs` that waited `wait` s to be claimed, ran `run` s, ended at `at`."""
    claimed = at - dt.timedelta(seconds=run)
    return JobFactory(
        queue=Q,
        state=state,
        attempt=attempt,
        created_at=claimed - dt.timedelta(seconds=wait),
        attempted_at=claimed,
        finalized_at=at,
    )


@pytest.mark.django_db
def test_queue_rollup_minutes_rolls_up_counts_percentiles_depth_and_lag() -> None:
    minute = db_minute(-1)
    for wait, run in [(1.0, 2.0), (3.0, 4.0), (5.0, 6.0)]:
        finalized("completed", minute + dt.timedelta(seconds=10), wait, run)
    finalized("failed", minute + dt.timedelta(seconds=20), 1.0, 1.0, attempt=3)
    finalized("cancelled", minute + dt.timedelta(seconds=30), 1.0, 1.0)
    finalized("completed", minute - dt.timedelta(minutes=30), 1.0, 1.0)  # outside the range
    JobFactory.create_batch(2, queue=Q, state="available")
    assert rollups_sql.queue_rollup_minutes(minutes=3).run("default") >= 1
    row = QueueRollup.objects.get(queue=Q, minute=minute)
    assert (row.completed, row.failed, row.cancelled, row.retried) == (3, 1, 1, 2)
    assert row.wait_p50 == pytest.approx(1.0) and row.run_p50 == pytest.approx(2.0)
    assert row.run_p95 is not None and 4.0 < row.run_p95 <= 6.0
    newest = QueueRollup.objects.filter(queue=Q).latest("minute")
    assert newest.depth == 2 and newest.lag_seconds is not None and newest.lag_seconds >= 0
    # Idempotent: rolled up again, the same minute keeps the same figures, no second row.
    rollups_sql.queue_rollup_minutes(minutes=3).run("default")
    again = QueueRollup.objects.get(queue=Q, minute=minute)
    assert (again.completed, again.failed, again.retried) == (3, 1, 2)
    assert QueueRollup.objects.filter(queue=Q, minute=minute).count() == 1


@pytest.mark.django_db
def test_queue_rollup_prune_deletes_rollups_past_the_retention() -> None:
    old = QueueRollup.objects.create(queue=Q, minute=db_minute(-2 * 24 * 60))
    recent = QueueRollup.objects.create(queue=Q, minute=db_minute(-10))
    assert rollups_sql.queue_rollup_prune(retention_seconds=24 * 3600).run("default") == 1
    assert list(QueueRollup.objects.values_list("id", flat=True)) == [recent.id]
    assert not QueueRollup.objects.filter(id=old.id).exists()


def explain(sql: str, params: dict[str, int]) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the test table is tiny
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


# A scan of the jobs table through one of its indexes. Which index a planner picks depends
# on its version and on the statistics earlier tests left (a full run leaves thousands of
# rows in them), so the plans are held to what matters: never a read of the whole table.
THROUGH_AN_INDEX = re.compile(
    r"Index (Only )?Scan (Backward )?using awa_jobs_\w+ on awa_jobs_hot"
    r"|Bitmap Index Scan on awa_jobs_\w+"
)


def reads_jobs_through_indexes(plan: str) -> bool:
    return "Seq Scan on awa_jobs_hot" not in plan and bool(THROUGH_AN_INDEX.search(plan))


@pytest.mark.django_db
def test_queue_depth_lag_reads_jobs_through_an_index() -> None:
    JobFactory.create_batch(3, queue=Q, state="available")
    plan = explain(rollups_sql.QUEUE_DEPTH_LAG.sql, {})
    # The dispatch index's entries as a rule (an index-only scan once the visibility map is
    # set); whichever index, never the table.
    assert reads_jobs_through_indexes(plan), plan
    assert [(f.queue, f.depth) for f in rollups_sql.queue_depth_lag().run("default")] == [(Q, 3)]


@pytest.mark.django_db
def test_the_rollup_reads_jobs_through_indexes() -> None:
    plan = explain(rollups_sql.QUEUE_ROLLUP_MINUTES.sql, {"minutes": 5})
    # The finalized index for the minute's outcomes, the dispatch index for its depth, as a
    # rule; whichever indexes, never the table.
    assert reads_jobs_through_indexes(plan), plan


@pytest.mark.django_db(transaction=True)
def test_the_leader_services_write_rollups_and_publish_depth_and_lag() -> None:
    finalized("completed", db_minute(-1) + dt.timedelta(seconds=5), 1.0, 1.0)
    JobFactory(queue=Q, state="available")
    metrics = WorkerMetrics(prometheus=True)

    async def main() -> tuple[int, dict[str, tuple[int, float]]]:
        db = Database("default", "awa-obs-test", max_size=2)
        await db.open()
        try:
            written = await Rollup(db, retention=3600).run_once()
            figures = await QueueDepth(db, metrics, [Q, "idle"]).run_once()
            return written, figures
        finally:
            await db.close()

    written, figures = asyncio.run(main())
    assert written >= 1 and QueueRollup.objects.filter(queue=Q, completed=1).exists()
    assert figures["idle"] == (0, 0.0) and figures[Q][0] == 1
    metrics.is_leader = lambda: True
    text = metrics.render().decode()
    assert f'awa_queue_depth{{queue="{Q}"}} 1.0' in text
    assert 'awa_queue_depth{queue="idle"} 0.0' in text


@pytest.mark.django_db
def test_dead_letter_depth_reads_the_queue_index_only() -> None:
    DeadLetterFactory.create_batch(2, queue=Q)
    DeadLetterFactory(queue="other-dead")
    plan = explain(rollups_sql.DEAD_LETTER_DEPTH.sql, {})
    assert "awa_dead_letters_queue_idx" in plan and "Seq Scan" not in plan, plan
    assert rollups_sql.dead_letter_depth().run("default") == {Q: 2, "other-dead": 1}


@pytest.mark.django_db(transaction=True)
def test_the_leader_publishes_a_dead_letter_depth_per_queue() -> None:
    DeadLetterFactory.create_batch(3, queue=Q)
    DeadLetterFactory(queue="elsewhere")
    metrics = WorkerMetrics(prometheus=True)

    with_db(lambda db: QueueDepth(db, metrics, [Q, "idle"]).run_once())
    assert "awa_dead_letter_depth" not in metrics.render().decode()  # the leader's only
    metrics.is_leader = lambda: True
    text = metrics.render().decode()
    assert f'awa_dead_letter_depth{{queue="{Q}"}} 3.0' in text
    assert 'awa_dead_letter_depth{queue="elsewhere"} 1.0' in text
    assert 'awa_dead_letter_depth{queue="idle"} 0.0' in text  # a queue of its own, none


@pytest.mark.django_db
def test_the_client_reads_history_per_kind_figures_and_outcomes() -> None:
    at = db_minute(-1) + dt.timedelta(seconds=10)
    for state in ("completed", "completed", "completed", "failed"):
        finalized(state, at, 1.0, 2.0)
    QueueRollup.objects.create(queue=Q, minute=db_minute(-2), completed=7)
    client = Client()
    (point,) = client.queue_history(60)
    assert (point.queue, point.completed) == (Q, 7)
    (kind,) = client.kind_figures(60)
    assert (kind.kind, kind.count, kind.failed) == ("send_receipt", 4, 1)
    assert kind.failure_rate == 0.25 and kind.p95_seconds == pytest.approx(2.0)
    assert client.queue_outcomes(5) == {Q: (3, 1)}


def check(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("awa_status", "--check", *args, stdout=out)
    except SystemExit as exit_:
        return int(exit_.code or 0), out.getvalue()
    return 0, out.getvalue()


@pytest.mark.django_db
def test_awa_status_check_exits_non_zero_with_one_line_per_breach() -> None:
    at = db_minute(0)
    finalized("completed", at, 1.0, 1.0)
    finalized("failed", at, 1.0, 1.0)
    JobFactory(queue=Q, state="available", run_at=at - dt.timedelta(minutes=10))
    code, text = check("--max-lag", "60", "--max-failure-rate", "0.25")
    assert code == 1
    assert f"BREACH {Q}: lag" in text and "> 60s" in text
    assert f"BREACH {Q}: failure rate 50.0% > 25.0%" in text
    assert check("--max-lag", "3600", "--max-failure-rate", "0.5") == (
        0,
        f"OK: {len(Client().queue_stats())} queues within thresholds\n",
    )
    assert check("--max-failure-rate", "0.25", "--min-jobs", "3")[0] == 0  # too few to judge


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--check needs --max-lag and/or --max-failure-rate"),
        (("--max-failure-rate", "1.5"), "the failure rate threshold is 0..1, got 1.5"),
        (("--max-lag", "-1"), "the lag threshold is seconds >= 0, got -1.0"),
        (("--max-lag", "nan"), "the lag threshold is seconds >= 0, got nan"),
    ],
)
def test_awa_status_check_refuses_bad_thresholds(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("awa_status", "--check", *args, stdout=io.StringIO())


@pytest.mark.django_db
def test_the_dashboard_draws_the_history_and_serves_it_alone_for_refreshes(admin_client) -> None:
    for offset, completed in [(-3, 4), (-2, 9), (-1, 2)]:
        QueueRollup.objects.create(
            queue="chart<q>", minute=db_minute(offset), completed=completed, failed=1, lag_seconds=3
        )
    finalized("completed", db_minute(-1), 1.0, 2.0)
    page = admin_client.get(reverse("admin:awa_django_dashboard")).content.decode()
    assert page.count('<svg class="awa-chart"') == 3
    assert 'data-series="chart&lt;q&gt;"' in page and "chart<q>" not in page  # escaped
    assert 'id="awa-kinds"' in page and 'data-kind="send_receipt"' in page
    fragment = admin_client.get(reverse("admin:awa_django_dashboard_history"), {"range": "day"})
    text = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in text
    assert 'data-range="day"' in text and text.count("<svg") == 3


@pytest.mark.django_db
def test_the_job_list_shows_a_state_summary_bar(admin_client) -> None:
    JobFactory.create_batch(3, queue=Q, state="available")
    JobFactory(queue=Q, state="failed")
    page = admin_client.get(reverse("admin:awa_django_job_changelist")).content.decode()
    assert 'id="awa-state-summary"' in page
    assert 'data-state="available"' in page and "available 3" in page
    assert "failed 1" in page and 'data-state="running"' not in page  # only states with jobs
