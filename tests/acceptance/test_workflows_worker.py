"""Workflows with a real worker process (decision 043): a group fanned in to one child,
a chain, and a child whose policy runs it after a failed parent. Each child runs exactly
once, after every parent ran (its Execution row is written later than theirs), woken by
the trigger's NOTIFY of its queue. The crash test with SIGKILLed workers is the ops
suite's (issue 29)."""

from __future__ import annotations

import pytest

import awa_django
from awa_django.storage.models import Job
from testproject.testjobs.jobs import AccNoop, AccOutcome
from testproject.testjobs.models import Execution
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def executions(job_id: int) -> list[int]:
    return list(Execution.objects.filter(job_id=job_id).values_list("id", flat=True))


def test_flows_run_each_child_once_after_its_parents(start_worker):
    flow = awa_django.group(*[AccNoop(i) for i in range(5)]).then(AccNoop(100))
    chain = awa_django.chain(AccNoop(200), AccNoop(201), AccNoop(202))
    failing = awa_django.enqueue(AccOutcome("fail"))
    told = awa_django.enqueue(AccNoop(300), after=[failing], on_parent_failure="run")
    dropped = awa_django.enqueue(AccNoop(301), after=[failing], on_parent_failure="discard")
    worker = start_worker("--queue", "acc=4")
    children = [flow.child.id, chain[1].id, chain[2].id, told.id]
    wait_until(lambda: all(executions(c) for c in children) or None, timeout=60, what="every child")
    wait_until(
        lambda: not Job.objects.filter(id__in=children).exclude(state="completed").exists() or None,
        timeout=60,
        what="every child completed",
    )
    assert worker.stop() == 0
    for child, parents in [
        (flow.child.id, [m.id for m in flow.members]),
        (chain[1].id, [chain[0].id]),
        (chain[2].id, [chain[1].id]),
    ]:
        (ran,) = executions(child)  # exactly once
        assert all(max(executions(p)) < ran for p in parents)  # after every parent ran
    assert len(executions(told.id)) == 1
    assert Job.objects.get(id=failing.id).state == "failed"
    assert not Job.objects.filter(id=dropped.id).exists() and not executions(dropped.id)
