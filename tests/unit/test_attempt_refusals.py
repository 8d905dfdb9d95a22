"""How an attempt's steps (execution/attempt.py) answer an outcome the database refused:
the job fails for good with a bare failure that leaves the progress unwritten (it may be
the culprit), and if even that is refused, the refusal ends the steps (rescue ends the
attempt). The steps are driven by hand: no database."""

from __future__ import annotations

from typing import Any

import pytest

from awa_django.exceptions import OutcomeNotStored
from awa_django.execution import attempt
from awa_django.execution.context import JobContext
from awa_django.execution.outcomes import plan_failure
from awa_django.storage.query import Query
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql.transitions import FAIL, RETRY_LATER
from tests.unit.test_outcomes import make_row


def test_a_refused_outcome_is_followed_by_a_bare_failure_without_progress() -> None:
    row = make_row(progress={"step": 3})
    job: JobContext[Any] = JobContext(row, None)
    steps = attempt.finish(job, plan_failure(row, ValueError("boom")), 0.1, 1000)

    retry = next(steps)
    assert isinstance(retry, Query)
    assert (
        retry.statement
        == jobs_sql.job_set_state_if_running(
            id=row.id, run_lease=row.run_lease, move=RETRY_LATER
        ).statement
    )
    assert retry.params["progress"] == '{"step":3}'
    bare = steps.throw(OutcomeNotStored("value too long"))
    assert isinstance(bare, Query)
    failing = jobs_sql.job_set_state_if_running(id=row.id, run_lease=row.run_lease, move=FAIL)
    assert bare.statement == failing.statement and bare.params["terminal"] is True
    assert bare.params["progress"] is None
    with pytest.raises(OutcomeNotStored, match="still refused"):
        steps.throw(OutcomeNotStored("still refused"))
