"""`awa_status`'s table lines up: every header sits over its column, words left-aligned
(queue, status, limits), figures right-aligned (issue 27 §4)."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command

from awa_django.client import Client
from tests.factories import JobFactory

LEFT = {"queue", "status", "limits"}


def table() -> list[str]:
    out = StringIO()
    call_command("awa_status", stdout=out)
    lines = out.getvalue().splitlines()
    return lines[: lines.index("")] if "" in lines else lines


@pytest.mark.django_db
def test_every_header_sits_over_its_column() -> None:
    JobFactory.create_batch(12, queue="email", state="failed")
    Client().pause_queue("default", by="ops")
    Client().set_queue_limits("email", concurrency=2, rate_limit=(5, 3))
    header, *rows = table()
    assert len(rows) >= 2
    for label in re.finditer(r"\S+", header):
        start, end = label.span()
        for row in rows:
            if label.group() in LEFT:  # starts where its header starts
                assert row[start] != " " and (start == 0 or row[start - 1] == " "), (
                    label.group(),
                    header,
                    row,
                )
            else:  # ends where its header ends
                assert row[end - 1] != " " and (end == len(row) or row[end] == " "), (
                    label.group(),
                    header,
                    row,
                )
