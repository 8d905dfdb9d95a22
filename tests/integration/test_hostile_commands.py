"""Values no schedule, window, queue size, worker id or host can have are refused before
any SQL or connection, as typed errors (issue 26's rule, applied where an outside review
found it missing): the Client's schedule verbs raise ScheduleNotFound, the commands a
CommandError, never a traceback or a worker that loops on a refused connection."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from awa_django.client import Client
from awa_django.exceptions import ScheduleNotFound

pytestmark = pytest.mark.django_db

UNSTORABLE = ["a\x00b", "\ud800", "\udcff"]  # \udcff: a non-UTF-8 byte from the shell


@pytest.mark.parametrize("name", [*UNSTORABLE, 5, None])
@pytest.mark.parametrize(
    "verb", ["schedule", "pause_schedule", "resume_schedule", "remove_schedule", "trigger_schedule"]
)
def test_the_schedule_verbs_refuse_a_name_no_schedule_can_have(verb: str, name: Any) -> None:
    with CaptureQueriesContext(connection) as queries, pytest.raises(ScheduleNotFound):
        getattr(Client(), verb)(name)
    assert len(queries) == 0


@pytest.mark.parametrize("verb", ["pause", "resume", "trigger", "remove"])
def test_awa_cron_refuses_an_undecodable_name_with_a_message(verb: str) -> None:
    with pytest.raises(CommandError, match="no cron schedule named"):
        call_command("awa_cron", verb, "\udcff", stdout=io.StringIO())


def test_awa_status_refuses_a_window_past_a_week() -> None:
    with pytest.raises(CommandError, match="--window must be 1 to 10080 minutes"):
        call_command("awa_status", "--window", "99999999999999999999", stdout=io.StringIO())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "default=99999999999999999999"], "concurrency must be 1 to 10000"),
        (["--worker-id", "\udcff"], "--worker-id contains a lone surrogate"),
        (["--worker-id", "w" * 201], "--worker-id must be 1 to 200 characters"),
        (["--metrics-host", "\udcff", "--metrics-port", "0"], "not a host name or address"),
    ],
)
def test_awa_worker_refuses_values_it_could_not_run_with(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("awa_worker", *args, stdout=io.StringIO())
