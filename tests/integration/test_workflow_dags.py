"""Random DAGs of up to 20 jobs with random outcomes and policies (decision 043): after a
`testing.drain()`, each job ran iff the rules say so, exactly once, and never before
every one of its parents ended (a parent that ran ran earlier)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import awa_django
from awa_django import TerminalError
from awa_django.execution.context import JobContext
from awa_django.storage.models import Job
from awa_django.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "wf-dags"
OUTCOMES = ("complete", "fail", "cancel")
POLICIES = ("cancel", "run", "discard")
ran: list[int] = []  # job ids in the order their handlers ran


@dataclass
class Node:
    outcome: str


@awa_django.job(Node, queue=QUEUE, max_attempts=1)
def node(job: JobContext[Node]) -> Any:
    ran.append(job.id)
    if job.args.outcome == "fail":
        raise TerminalError("planned failure")
    if job.args.outcome == "cancel":
        return awa_django.Cancel("planned")
    return None


@dataclass(frozen=True)
class Spec:
    parents: tuple[int, ...]  # indexes of earlier nodes
    outcome: str
    policy: str


@st.composite
def dags(draw: st.DrawFn) -> list[Spec]:
    size = draw(st.integers(1, 20))
    specs = []
    for index in range(size):
        parents = draw(st.sets(st.integers(0, index - 1), max_size=4)) if index else set()
        specs.append(
            Spec(
                tuple(sorted(parents)),
                draw(st.sampled_from(OUTCOMES)),
                draw(st.sampled_from(POLICIES)),
            )
        )
    return specs


def expected(specs: list[Spec]) -> tuple[set[int], dict[int, str | None]]:
    """Which nodes run, and each node's final state (None: deleted), by the rules."""
    runs: set[int] = set()
    final: dict[int, str | None] = {}
    ended_ok: dict[int, bool] = {}
    for index, spec in enumerate(specs):
        failed = any(not ended_ok[p] for p in spec.parents)
        if failed and spec.policy == "cancel":
            final[index], ended_ok[index] = "cancelled", False
        elif failed and spec.policy == "discard":
            final[index], ended_ok[index] = None, False
        else:
            runs.add(index)
            final[index] = {"complete": "completed", "fail": "failed", "cancel": "cancelled"}[
                spec.outcome
            ]
            ended_ok[index] = spec.outcome == "complete"
    return runs, final


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs=dags())
def test_a_random_dag_runs_each_job_iff_the_rules_say_so(specs: list[Spec]) -> None:
    ran.clear()
    with transaction.atomic():
        ids: list[int] = []
        for spec in specs:
            after = [ids[p] for p in spec.parents] or None
            row = awa_django.enqueue(Node(spec.outcome), after=after, on_parent_failure=spec.policy)
            ids.append(row.id)
    drain(QUEUE)
    runs, final = expected(specs)
    assert sorted(ran) == sorted(ids[i] for i in runs)  # each runs iff it should, once
    order = {job_id: position for position, job_id in enumerate(ran)}
    for index in runs:
        for parent in specs[index].parents:
            if ids[parent] in order:
                assert order[ids[parent]] < order[ids[index]]
    states = dict(Job.objects.filter(id__in=ids).values_list("id", "state"))
    assert [states.get(ids[i]) for i in range(len(specs))] == [final[i] for i in range(len(specs))]
