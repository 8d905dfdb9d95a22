"""Per-key concurrency (decision 045) where it meets other features that move keyed jobs:
bulk operations, priority aging, uniqueness, a key used from two queues, an override
lowered while jobs run, and the leader's sweep under a paused queue. Each test checks the
rule after every step: at most max_in_flight jobs of a key admitted (available or running),
every admitted job holding a slot row that names it, and no more slot rows held than that.

Each test runs in one transaction (rolled back), as tests/integration/test_concurrency_keys.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import F
from django.test import override_settings

import awa_django
from awa_django import Client
from awa_django.bulk import JobFilter
from awa_django.execution.inline import run_available
from awa_django.keys import key_digest
from awa_django.storage.models import Job, KeySlot
from awa_django.storage.sql import aging as aging_sql
from awa_django.storage.sql import keys as keys_sql
from awa_django.unique import UniqueOpts
from tests.integration.sql_helpers import claim
from tests.integration.test_concurrency_keys import QUEUE, Keyed, KeyedPair, enqueue, state

pytestmark = pytest.mark.django_db

OTHER = "keys-seams-other"
ADMITTED = ("available", "running")


def admitted(key: str) -> list[Job]:
    return list(Job.objects.filter(concurrency_key=key_digest(key), state__in=ADMITTED))


def assert_rule(key: str, max_in_flight: int) -> None:
    """The rule of decision 045 for `key`, read in one snapshot (one transaction)."""
    jobs = admitted(key)
    assert len(jobs) <= max_in_flight, [(j.id, j.state, j.key_slot) for j in jobs]
    held = dict(
        KeySlot.objects.filter(key_digest=key_digest(key), job_id__isnull=False).values_list(
            "slot", "job_id"
        )
    )
    assert len(held) <= max_in_flight, held
    for job in jobs:
        assert job.key_slot is not None and held.get(job.key_slot) == job.id, (job.id, held)


def run_one(queue: str = QUEUE) -> None:
    assert run_available(queue, limit=1) == 1


def run_all(key: str, max_in_flight: int, queue: str = QUEUE) -> int:
    """Runs the queue's jobs one at a time, checking the rule after each."""
    ran = 0
    while run_available(queue, limit=1):
        ran += 1
        assert_rule(key, max_in_flight)
    return ran


# -- bulk operations --------------------------------------------------------------------------
def test_bulk_retry_of_failed_keyed_jobs_admits_only_max_in_flight() -> None:
    ids = [enqueue(mode="terminal") for _ in range(4)]
    run_all("acme", 1)
    assert {state(i) for i in ids} == {"failed"}
    progress = Client().retry_failed(kind="keyed")
    assert progress.done == 4
    assert sorted(state(i) for i in ids) == ["available"] + ["waiting_slot"] * 3
    assert_rule("acme", 1)
    assert run_all("acme", 1) == 4  # each hand-off admits the next: all four ran again


def test_bulk_cancel_and_retry_of_waiting_slot_jobs_keep_the_rule() -> None:
    ids = [awa_django.enqueue(KeyedPair("acme")).id for _ in range(5)]
    claim(queue=QUEUE, limit=1)  # one running, one available, three waiting
    Client().bulk_cancel(JobFilter(kind="keyed_pair", states=("waiting_slot",)))
    assert sorted(state(i) for i in ids) == [
        "available",
        "cancelled",
        "cancelled",
        "cancelled",
        "running",
    ]
    Client().bulk_retry(JobFilter(kind="keyed_pair"))  # the cancelled ones come back
    assert_rule("acme", 2)
    assert sorted(state(i) for i in ids).count("waiting_slot") == 3


def test_bulk_set_priority_and_move_queue_of_keyed_jobs_keep_the_rule() -> None:
    ids = [awa_django.enqueue(KeyedPair("acme")).id for _ in range(4)]
    claim(queue=QUEUE, limit=1)
    Client().bulk_set_priority(JobFilter(kind="keyed_pair"), 1)
    assert_rule("acme", 2)
    assert Job.objects.filter(id__in=ids, state="waiting_slot").count() == 2
    Client().bulk_move_queue(JobFilter(kind="keyed_pair"), OTHER)
    assert_rule("acme", 2)
    # The moved waiting jobs are still the key's: a release hands a slot across queues.
    assert Job.objects.filter(id__in=ids, queue=OTHER, state="waiting_slot").count() == 2
    # OTHER runs its three (the moved available one, then each waiting one in turn by the
    # hand-off) beside the job still running in QUEUE.
    assert run_all("acme", 2, queue=OTHER) == 3
    assert Job.objects.filter(id__in=ids, state="completed").count() == 3


# -- priority aging ---------------------------------------------------------------------------
@override_settings(AWA={"QUEUES": {QUEUE: {"priority_aging": 1}}})
def test_priority_aging_ages_admitted_jobs_and_leaves_waiting_ones_waiting() -> None:
    ids = [awa_django.enqueue(KeyedPair("acme"), priority=4).id for _ in range(5)]
    Job.objects.filter(id__in=ids).update(run_at=F("run_at") - dt.timedelta(hours=1))
    aged = aging_sql.job_age_priority(queue=QUEUE, interval=1, limit=100).run("default")
    assert aged == 2  # the two admitted (available) jobs; waiting ones are not claimable
    assert_rule("acme", 2)
    assert Job.objects.filter(id__in=ids, state="waiting_slot", priority=4).count() == 3
    assert run_all("acme", 2) == 5


# -- uniqueness -------------------------------------------------------------------------------
def test_a_unique_keyed_job_keeps_the_rule_and_its_unique_key_through_waiting() -> None:
    holder = enqueue()
    unique = UniqueOpts(by_args=True)
    waiting = awa_django.enqueue(Keyed("acme", "ok"), unique=unique).id
    assert state(waiting) == "waiting_slot"
    with pytest.raises(awa_django.UniqueConflict):
        awa_django.enqueue(Keyed("acme", "ok"), unique=unique)
    assert_rule("acme", 1)
    run_one()
    assert state(holder) == "completed" and state(waiting) == "available"
    assert_rule("acme", 1)
    run_one()
    assert state(waiting) == "completed"


# -- one key, two queues ------------------------------------------------------------------------
def test_a_key_used_from_two_queues_has_one_slot_set() -> None:
    """The slot rows belong to the key (its digest), not to a queue: jobs of one key in two
    queues share its max_in_flight (decision 045, Storage)."""
    here = [awa_django.enqueue(KeyedPair("acme")).id for _ in range(2)]
    there = [awa_django.enqueue(KeyedPair("acme"), queue=OTHER).id for _ in range(2)]
    assert [state(i) for i in here + there] == ["available"] * 2 + ["waiting_slot"] * 2
    assert_rule("acme", 2)
    assert claim(queue=OTHER, limit=10) == []
    run_one()  # a slot freed in QUEUE is handed to OTHER's first waiting job
    assert state(there[0]) == "available"
    assert_rule("acme", 2)
    assert len(claim(queue=OTHER, limit=10)) == 1
    assert_rule("acme", 2)


# -- overrides -----------------------------------------------------------------------------
def test_an_override_lowered_while_jobs_run_admits_nobody_until_below_the_new_max() -> None:
    ids = [awa_django.enqueue(KeyedPair("acme")).id for _ in range(4)]
    running = [job.id for job in claim(queue=QUEUE, limit=2)]
    assert sorted(running) == ids[:2]
    Client().set_key_limits("keyed_pair", max_in_flight=1, by="ops")
    # Slot 0 frees while slot 1 (above the new max) still runs: its waiting job must not
    # be admitted, by the hand-off or by the sweep.
    Client().cancel(ids[0])
    assert state(ids[2]) == "waiting_slot"
    assert_rule("acme", 1)
    assert keys_sql.job_admit_waiting(limit=100).run("default") == 0
    assert_rule("acme", 1)
    # The last holder above the new max leaves: the next waiting job takes a slot.
    Client().cancel(ids[1])
    assert state(ids[2]) == "available" and state(ids[3]) == "waiting_slot"
    assert_rule("acme", 1)
    assert run_all("acme", 1) == 2


# -- the sweep under a paused queue -----------------------------------------------------------
def test_the_sweep_under_a_paused_queue_admits_up_to_the_max_and_nothing_runs() -> None:
    ids = [enqueue() for _ in range(5)]
    Client().pause_queue(QUEUE, by="ops")
    Client().set_key_limits("keyed", max_in_flight=3)
    while keys_sql.job_admit_waiting(limit=100).run("default"):
        assert_rule("acme", 3)
    assert sorted(state(i) for i in ids) == ["available"] * 3 + ["waiting_slot"] * 2
    assert claim(queue=QUEUE, limit=10) == []  # admitted, but the pause holds them
    assert_rule("acme", 3)
    Client().resume_queue(QUEUE)
    assert len(claim(queue=QUEUE, limit=10)) == 3
    assert_rule("acme", 3)


def test_a_kind_with_a_lower_max_on_a_shared_key_waits_for_the_key_to_drain_below_it() -> None:
    """Two kinds, one key: `keyed` (max 1) is admitted only while the key's admitted jobs of
    every kind fit its own max, never beside a `keyed_pair` job in slot 1."""
    pair = [awa_django.enqueue(KeyedPair("acme")).id for _ in range(2)]
    single = enqueue("acme")
    assert state(single) == "waiting_slot"
    Client().cancel(pair[0])  # slot 0 frees; slot 1 is still held
    assert state(single) == "waiting_slot"
    assert_rule("acme", 1)
    assert keys_sql.job_admit_waiting(limit=100).run("default") == 0
    Client().cancel(pair[1])
    assert state(single) == "available"
    assert_rule("acme", 1)
