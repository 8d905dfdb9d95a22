"""`manage.py awa_jobs`: bulk operations from the command line (decision 018): dry run,
confirmation, the progress bar on stderr, `--resume`, and clear errors for bad input."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from awa_django.bulk import BulkAction, JobFilter
from awa_django.client import bulk as client_bulk
from awa_django.storage.models import BulkOperation, Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

Q = "core-jobs-cmd"


def awa_jobs(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("awa_jobs", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_dry_run_counts_and_changes_nothing() -> None:
    JobFactory.create_batch(3, state="failed", queue=Q)
    out, _ = awa_jobs("retry-failed", "--queue", Q, "--dry-run")
    assert "retry-failed would look at 3 jobs (dry run)" in out
    assert Job.objects.filter(queue=Q, state="failed").count() == 3


def test_without_yes_and_without_a_terminal_it_refuses() -> None:
    JobFactory(state="failed", queue=Q)
    with pytest.raises(CommandError, match="Pass --yes"):
        awa_jobs("retry-failed", "--queue", Q)
    assert Job.objects.get(queue=Q).state == "failed"


def test_yes_runs_with_a_progress_bar_on_stderr() -> None:
    JobFactory.create_batch(5, state="failed", queue=Q)
    out, err = awa_jobs("retry-failed", "--queue", Q, "--yes", "--chunk-size", "2")
    assert Job.objects.filter(queue=Q, state="available").count() == 5
    assert err.count("\r[") == 3 and "100%" in err and err.endswith("\n"), err
    assert "retry completed; done=5 matched=5 skipped=0" in out


def test_drain_cancels_the_waiting_jobs_of_a_queue() -> None:
    waiting = JobFactory(state="available", queue=Q)
    running = JobFactory(state="running", queue=Q)
    awa_jobs("drain", Q, "--yes")
    assert Job.objects.get(pk=waiting.pk).state == "cancelled"
    assert Job.objects.get(pk=running.pk).state == "running"


def test_filters_as_options_for_set_priority_and_move_queue() -> None:
    tagged = JobFactory(state="available", queue=Q, tags=["x"])
    plain = JobFactory(state="available", queue=Q)
    awa_jobs("set-priority", "4", "--queue", Q, "--tag", "x", "--yes")
    awa_jobs("move-queue", "core-jobs-cmd-2", "--queue", Q, "--state", "available", "--yes")
    tagged.refresh_from_db()
    plain.refresh_from_db()
    assert (tagged.priority, tagged.queue) == (4, "core-jobs-cmd-2")
    assert (plain.priority, plain.queue) == (2, "core-jobs-cmd-2")


def test_resume_finishes_a_stopped_operation_and_show_and_list_print_it() -> None:
    JobFactory.create_batch(3, state="failed", queue=Q)
    where = JobFilter(queue=Q, states=("failed",))
    operation_id = client_bulk.start("default", BulkAction.RETRY, where, chunk_size=2)
    client_bulk.run_chunk("default", operation_id)  # then the process "stopped"
    shown, _ = awa_jobs("--show", str(operation_id))
    assert "retry running" in shown and f"--resume {operation_id}" in shown
    out, err = awa_jobs("--resume", str(operation_id))
    assert f"operation {operation_id}: retry completed; done=3" in out and "100%" in err
    listed, _ = awa_jobs()
    assert f"operation {operation_id}: retry completed" in listed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cancel", "--state", "finished", "--yes"), "unknown state"),
        (("retry", "--state", "completed", "--yes"), "retry applies to"),
        (("set-priority", "900", "--yes"), "priority must be between"),
        (("move-queue", "bad name", "--yes"), "invalid queue name"),
        (("--resume", "999999999"), "no bulk operation"),
    ],
)
def test_bad_input_is_a_command_error(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        awa_jobs(*args)
    assert not BulkOperation.objects.exists()


def test_a_date_time_that_is_not_iso_is_refused() -> None:
    with pytest.raises(CommandError, match="ISO 8601"):
        awa_jobs("cancel", "--created-after", "yesterday", "--yes")
