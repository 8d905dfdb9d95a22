"""A worker that meets a kind it has no handler for says where it looked: the apps it loaded
jobs from, and that the declaring app may be missing from INSTALLED_APPS (issue 27 §2)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from django.utils import timezone

from awa_django.execution.inline import run_available
from awa_django.storage.models import Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db
QUEUE = "unknown-kind-warning"


def test_the_warning_names_the_apps_jobs_came_from_and_the_installed_apps_hint(
    caplog: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # Due a minute ago: the model's default run_at is later than this transaction's now().
    due = timezone.now() - dt.timedelta(minutes=1)
    job = JobFactory(kind="send_receipt_from_a_missing_app", queue=QUEUE, run_at=due)
    with (
        caplog.at_level(logging.WARNING, logger="awa_django.worker"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        run_available(QUEUE)
    assert Job.objects.get(id=job.id).state == "failed"  # no grace inline
    (message,) = [r.getMessage() for r in caplog.records if "no handler for kind" in r.getMessage()]
    assert f"job {job.id}: no handler for kind 'send_receipt_from_a_missing_app'" in message
    # testproject's apps with a jobs.py, by label.
    assert "loaded jobs from apps: " in message
    loaded = message.split("loaded jobs from apps: ", 1)[1].split(". ", 1)[0].split(", ")
    assert {"shop", "testjobs"} <= set(loaded), message
    assert "missing from INSTALLED_APPS" in message
