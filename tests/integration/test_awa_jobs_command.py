"""`manage.py awa_jobs`: bulk operations from the command line (decision 018): dry run,
confirmation, the progress bar on stderr, `--resume`, and clear errors for bad input."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from awa_django.bulk import BulkAction, JobFilter
from awa_django.client import bulk as client_bulk
from awa_django.management.commands.awa_jobs import VERBS, Command
from awa_django.storage.models import BulkOperation, Job
from testproject.shop.demo import database_url
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
        (("--resume", "99999999999999999999"), "no bulk operation"),
        # Issue 26: each used to reach the database and print a traceback.
        (("retry", "--kind", "a\udcff", "--yes"), "kind 'a\\\\udcff' contains a lone surrogate"),
        (("retry", "--tag", "a\udcff", "--yes"), "lone surrogate"),
        (("cancel", "--queue", "a\udcff", "--yes"), "invalid queue name"),
        (("retry", "--kind", "k" * 201, "--yes"), "kind must be a string of 1-200"),
        (("--database", "nope", "retry", "--yes"), "no database 'nope'"),
    ],
)
def test_bad_input_is_a_command_error(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        awa_jobs(*args)
    assert not BulkOperation.objects.exists()


def test_a_date_time_that_is_not_iso_is_refused() -> None:
    with pytest.raises(CommandError, match="ISO 8601"):
        awa_jobs("cancel", "--created-after", "yesterday", "--yes")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("set-priority", "99999999999999999999"), "priority must be between"),
        (("move-queue", "bad name"), "invalid queue name"),
        (("retry", "--chunk-size", "0"), "chunk_size must be between"),
        (("retry", "--kind", "a\x00"), "NUL"),
        (("--max-per-second", "nan", "retry"), "max_per_second must be > 0"),
        (("--busy-fraction", "0", "retry"), "busy_fraction must be > 0"),
    ],
)
def test_the_dry_run_refuses_what_the_real_run_refuses(args: tuple[str, ...], message: str) -> None:
    JobFactory(state="available")
    for mode in ("--dry-run", "--yes"):
        with pytest.raises(CommandError, match=message):
            awa_jobs(*args, mode)
    assert not BulkOperation.objects.exists()


ROOT = Path(__file__).resolve().parents[2]


def test_undecodable_argv_is_a_command_error_not_a_traceback() -> None:
    # Bytes that are not UTF-8 arrive as lone surrogates (surrogateescape).
    env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict)}
    done = subprocess.run(
        [sys.executable, "manage.py", "awa_jobs", "retry", "--kind", b"a\xff", "--yes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 1, stderr
    assert "CommandError: kind" in stderr and "Traceback" not in stderr


def test_every_verb_has_a_help_line_in_words() -> None:
    text = Command().create_parser("manage.py", "awa_jobs").format_help()
    assert "retry-failed the matching" not in text
    for verb, (_, _, help_text) in VERBS.items():
        line = next(line for line in text.splitlines() if line.strip().startswith(verb + " "))
        assert line.split(None, 1)[1].startswith(help_text[:20]), line
        assert "-" not in help_text.split()[0]  # a verb in words, not the command's name
