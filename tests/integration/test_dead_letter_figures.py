"""Dead-lettered failures count as failures wherever failures are counted: the leader's
per-minute rollups (the dashboard's failure chart), the per-kind figures (the kinds table),
the queue figures (the dashboard's queue row, `awa_status`) and the outcomes behind
`awa_status --check` (issue 27, section 3)."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from awa_django.client import Client
from awa_django.storage.models import DeadLetter, QueueRollup
from awa_django.storage.sql import rollups as rollups_sql
from tests.factories import DeadLetterFactory, JobFactory
from tests.integration.test_observability import db_minute, explain, finalized

pytestmark = pytest.mark.django_db

Q = "obs"


def dead_letter(
    at: dt.datetime, reason: str = "max_attempts_exhausted", kind: str = "charge_card"
) -> None:
    letter = DeadLetterFactory(queue=Q, kind=kind, reason=reason, attempt=3)
    # dead_lettered_at has a database default; set it to the moment wanted.
    DeadLetter.objects.filter(pk=letter.pk).update(dead_lettered_at=at)


def test_the_rollup_counts_dead_lettered_jobs_as_failed_in_their_minute() -> None:
    minute = db_minute(-1)
    finalized("completed", minute + dt.timedelta(seconds=10), 1.0, 2.0)
    finalized("failed", minute + dt.timedelta(seconds=15), 1.0, 2.0)
    dead_letter(minute + dt.timedelta(seconds=20))
    dead_letter(minute + dt.timedelta(seconds=25), reason="manual")  # failed before: not new
    dead_letter(db_minute(-2) + dt.timedelta(seconds=5))  # a minute with no finalized job

    rollups_sql.queue_rollup_minutes(minutes=3).run("default")

    row = QueueRollup.objects.get(queue=Q, minute=minute)
    assert (row.completed, row.failed, row.retried) == (1, 2, 2)
    assert row.run_p50 == pytest.approx(2.0)  # percentiles over the finalized jobs only
    earlier = QueueRollup.objects.get(queue=Q, minute=db_minute(-2))
    assert (earlier.completed, earlier.failed, earlier.run_p50) == (0, 1, None)


def test_kind_figures_and_outcomes_count_dead_lettered_jobs_as_failed() -> None:
    at = db_minute(0)
    finalized("completed", at, 1.0, 1.0)
    JobFactory(queue=Q, kind="charge_card", state="completed", finalized_at=at, attempted_at=at)
    dead_letter(at)
    dead_letter(at, kind="refund")
    dead_letter(at - dt.timedelta(hours=2))  # outside the window

    figures = {f.kind: f for f in Client().kind_figures(60)}
    assert (figures["charge_card"].completed, figures["charge_card"].failed) == (1, 1)
    assert figures["charge_card"].failure_rate == 0.5
    assert (figures["refund"].count, figures["refund"].failure_rate) == (1, 1.0)
    assert Client().queue_outcomes(5) == {Q: (2, 2)}


def test_queue_figures_the_dashboard_row_and_awa_status_show_dead_letters(admin_client) -> None:
    JobFactory(queue=Q, state="available")
    dead_letter(db_minute(0))
    dead_letter(db_minute(-600))  # still kept: the row counts every dead letter held

    stats = {s.queue: s for s in Client().queue_stats()}
    assert stats[Q].dead_letters == 2

    page = admin_client.get(reverse("admin:awa_django_dashboard")).content.decode()
    row = page.split(f'data-queue="{Q}"')[1].split("</tr>")[0]
    cell = row.split('class="awa-num awa-queue-dead-letters"')[1].split("</td>")[0]
    assert ">2</a>" in cell and "/deadletter/?queue=obs" in cell

    out = io.StringIO()
    call_command("awa_status", stdout=out)
    header, *rows = out.getvalue().splitlines()
    line = next(r for r in rows if r.startswith(Q + " "))
    assert dict(zip(header.split(), line.split(), strict=False))["dead"] == "2"

    out = io.StringIO()
    call_command("awa_status", "--json", stdout=out)
    queues = {q["queue"]: q for q in json.loads(out.getvalue())["queues"]}
    assert queues[Q]["dead_letters"] == 2


def test_awa_status_check_counts_dead_lettered_jobs_in_the_failure_rate() -> None:
    at = db_minute(0)
    finalized("completed", at, 1.0, 1.0)
    dead_letter(at)
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("awa_status", "--check", "--max-failure-rate", "0.25", stdout=out)
    assert exit_.value.code == 1
    assert f"BREACH {Q}" in out.getvalue()


def test_the_rollup_reads_dead_letters_through_their_time_index() -> None:
    plan = explain(rollups_sql.QUEUE_ROLLUP_MINUTES.sql, {"minutes": 5})
    assert "awa_dead_letters_at_idx" in plan, plan
