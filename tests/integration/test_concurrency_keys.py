"""Per-key concurrency (decision 045) on real PostgreSQL: admission when a keyed job becomes
available, release on every path that moves it out, the hand-off to the key's next waiting
job, the leader's sweep, per-key rate limits and per-kind overrides.

Each test runs in one transaction (rolled back): the triggers run in it like in any other.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.test import override_settings

import awa_django
from awa_django import Client
from awa_django.bulk import JobFilter
from awa_django.exceptions import InvalidEnqueueOption
from awa_django.execution.inline import run_available
from awa_django.keys import key_digest
from awa_django.results import Cancel, RetryAfter, Snooze, WaitForCallback
from awa_django.storage.models import ActiveLease, DeadLetter, Job, KeyLimit, KeySlot
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import keys as keys_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.unique import UniqueOpts
from tests.integration.sql_helpers import claim, transaction_now

pytestmark = pytest.mark.django_db

QUEUE = "keys-paths"
DLQ = "keys-dead"


class KeyedBoom(Exception):
    pass


@dataclass
class Keyed:
    tenant: str
    mode: str = "ok"


def _keyed(job: awa_django.JobContext[Keyed]) -> Any:
    mode = job.args.mode
    if mode == "ok":
        return None
    if mode == "raise":
        raise KeyedBoom("boom")
    if mode == "retry_after":
        return RetryAfter(30)
    if mode == "snooze":
        return Snooze(30)
    if mode == "cancel":
        return Cancel("no")
    if mode == "terminal":
        raise awa_django.TerminalError("for good")
    if mode == "park":
        return WaitForCallback(job.register_callback(timeout=60))
    raise AssertionError(mode)


awa_django.job(Keyed, queue=QUEUE, concurrency_key=lambda a: a.tenant, max_in_flight=1)(_keyed)


@dataclass
class KeyedDead:
    tenant: str
    mode: str = "terminal"


awa_django.job(KeyedDead, queue=DLQ, concurrency_key=lambda a: a.tenant)(_keyed)  # type: ignore[arg-type]


@dataclass
class KeyedPair:
    tenant: str


@awa_django.job(KeyedPair, queue=QUEUE, concurrency_key=lambda a: a.tenant, max_in_flight=2)
def keyed_pair(job: awa_django.JobContext[KeyedPair]) -> None:
    return None


@dataclass
class KeyedRated:
    tenant: str


@awa_django.job(
    KeyedRated,
    queue=QUEUE,
    concurrency_key=lambda a: a.tenant,
    max_in_flight=10,
    key_rate_limit=(1, 1),
)
def keyed_rated(job: awa_django.JobContext[KeyedRated]) -> None:
    return None


@dataclass
class KeyedBroken:
    n: int


@awa_django.job(KeyedBroken, queue=QUEUE, concurrency_key=lambda a: None if a.n else 1 / a.n)
def keyed_broken(job: awa_django.JobContext[KeyedBroken]) -> None:
    return None


@dataclass
class Unkeyed:
    n: int


@awa_django.job(Unkeyed, queue=QUEUE)
def unkeyed(job: awa_django.JobContext[Unkeyed]) -> None:
    return None


def enqueue(tenant: str = "acme", mode: str = "ok", **options: Any) -> int:
    return awa_django.enqueue(Keyed(tenant, mode), **options).id


def state(job_id: int) -> str:
    return Job.objects.get(id=job_id).state


def holders(key: str) -> list[int]:
    """The ids of the jobs holding a slot of `key`."""
    rows = KeySlot.objects.filter(key_digest=key_digest(key), job_id__isnull=False)
    return sorted(job_id for job_id in rows.values_list("job_id", flat=True) if job_id)


def callback_of(job_id: int) -> uuid.UUID:
    callback_id = Job.objects.get(id=job_id).callback_id
    assert callback_id is not None
    return callback_id


def run_one() -> None:
    assert run_available(QUEUE, limit=1) == 1


# -- admission ----------------------------------------------------------------------------
def test_a_key_admits_max_in_flight_jobs_and_the_rest_wait_in_dispatch_order() -> None:
    ids = [awa_django.enqueue(KeyedPair("acme")).id for _ in range(4)]
    urgent = awa_django.enqueue(KeyedPair("acme"), priority=1).id
    other = awa_django.enqueue(KeyedPair("globex")).id
    assert [state(i) for i in ids] == ["available", "available", "waiting_slot", "waiting_slot"]
    assert state(urgent) == "waiting_slot" and state(other) == "available"
    assert holders("acme") == ids[:2]
    job = Job.objects.get(id=ids[0])
    assert job.concurrency_key is not None and bytes(job.concurrency_key) == key_digest("acme")
    assert KeySlot.objects.get(key_digest=key_digest("acme"), slot=0).key_text == "acme"
    # Completing one hands its slot to the most urgent waiting job, not the oldest.
    run_available(QUEUE, limit=1)
    assert state(urgent) == "available" and state(ids[2]) == "waiting_slot"


def test_jobs_without_a_key_never_touch_the_key_tables() -> None:
    job_id = awa_django.enqueue(Unkeyed(1)).id
    job = Job.objects.get(id=job_id)
    assert (job.state, job.concurrency_key, job.key_slot) == ("available", None, None)
    run_available(QUEUE)
    assert not KeySlot.objects.exists()


def test_enqueue_may_override_the_key_and_bulk_enqueue_keys_each_row() -> None:
    first = enqueue("acme")
    second = enqueue("globex", concurrency_key="acme")
    assert state(second) == "waiting_slot"
    ids = Client().enqueue_many([Keyed("initech"), Keyed("initech"), Keyed("umbrella")])
    assert [state(i) for i in ids] == ["available", "waiting_slot", "available"]
    assert holders("acme") == [first]


def test_copy_enqueue_admits_through_the_same_trigger() -> None:
    ids = Client().enqueue_many([Keyed(f"t{n % 4}") for n in range(100)])  # COPY: >= 64 rows
    states = [state(i) for i in ids]
    assert states[:4] == ["available"] * 4
    assert states[4:] == ["waiting_slot"] * 96


@pytest.mark.parametrize("key", ["", "x" * 201, "nul\x00", True, 1.5, ["a"], "\udc80"], ids=repr)
def test_bad_keys_are_refused_before_any_sql(key: object) -> None:
    with pytest.raises(InvalidEnqueueOption):
        enqueue(concurrency_key=key)
    assert not Job.objects.exists()


def test_a_key_function_that_raises_is_a_typed_error() -> None:
    with pytest.raises(InvalidEnqueueOption, match="concurrency_key function"):
        awa_django.enqueue(KeyedBroken(0))
    assert state(awa_django.enqueue(KeyedBroken(1)).id) == "available"  # key None: no key
    with pytest.raises(InvalidEnqueueOption, match="reserved"):
        enqueue(metadata={"_awa_concurrency": {"key": "forged"}})


# -- release on every path that moves an admitted job out -----------------------------------
@pytest.mark.parametrize(
    ("mode", "after"),
    [
        ("ok", "completed"),
        ("raise", "retryable"),
        ("retry_after", "retryable"),
        ("snooze", "scheduled"),
        ("cancel", "cancelled"),
        ("terminal", "failed"),
        ("park", "waiting_external"),
    ],
)
def test_each_outcome_frees_the_slot_for_the_next_job(mode: str, after: str) -> None:
    first, second = enqueue(mode=mode), enqueue()
    assert state(second) == "waiting_slot"
    run_one()
    assert state(first) == after
    assert state(second) == "available"
    assert holders("acme") == [second]
    assert Job.objects.get(id=first).key_slot is None


def test_a_snoozed_job_waits_for_a_slot_again_when_promoted() -> None:
    first, second = enqueue(mode="snooze"), enqueue()
    run_one()
    assert holders("acme") == [second]
    Job.objects.filter(id=first).update(run_at=F("run_at") - dt.timedelta(days=1))
    maintenance_sql.job_promote_due(limit=10).run("default")
    assert state(first) == "waiting_slot"  # `second` holds the key's one slot
    run_one()
    assert state(first) == "available" and holders("acme") == [first]


def test_cancel_of_an_available_or_running_job_frees_its_slot() -> None:
    first, second = enqueue(), enqueue()
    Client().cancel(first)
    assert state(second) == "available" and holders("acme") == [second]
    (row,) = claim(queue=QUEUE)
    assert row.id == second
    third = enqueue()
    Client().cancel(second)  # running
    assert state(third) == "available" and holders("acme") == [third]


def test_cancel_of_a_waiting_job_leaves_the_holder_alone() -> None:
    first, second = enqueue(), enqueue()
    Client().cancel(second)
    assert state(second) == "cancelled" and holders("acme") == [first]


def test_bulk_cancel_frees_every_slot_and_leaves_nothing_admitted() -> None:
    ids = [enqueue(tenant) for tenant in ("a", "a", "b", "b", "b")]
    claim(queue=QUEUE, limit=1)
    progress = Client().bulk_cancel(JobFilter(queue=QUEUE))
    assert progress.done == 5
    assert {state(i) for i in ids} == {"cancelled"}
    assert not KeySlot.objects.filter(job_id__isnull=False).exists()


def test_a_rescued_attempt_frees_its_slot_at_rescue_not_before() -> None:
    first, second = enqueue(), enqueue()
    assert [row.id for row in claim(queue=QUEUE)] == [first]
    assert holders("acme") == [first]  # running: still held
    ActiveLease.objects.filter(job_id=first).update(
        heartbeat_at=transaction_now() - dt.timedelta(hours=1)
    )
    rescued = maintenance_sql.job_rescue_stale_heartbeat(
        limit=10, staleness_seconds=90, message="stale"
    ).run("default")
    assert [r.id for r in rescued] == [first]
    assert state(first) == "retryable" and state(second) == "available"
    assert holders("acme") == [second]


@override_settings(AWA={"QUEUES": {QUEUE: {}, DLQ: {"dead_letter": True}}})
def test_a_dead_lettered_job_frees_its_slot_and_a_retried_dead_letter_waits_again() -> None:
    first = awa_django.enqueue(KeyedDead("acme")).id
    second = awa_django.enqueue(KeyedDead("acme", "ok")).id
    assert run_available(DLQ, limit=1) == 1
    assert not Job.objects.filter(id=first).exists()
    assert DeadLetter.objects.filter(id=first).exists()
    assert state(second) == "available" and holders("acme") == [second]
    Client().retry_dead_letter(first)
    assert state(first) == "waiting_slot"  # back under its key, behind `second`


def test_a_parked_job_resumed_waits_for_a_slot_when_its_key_is_full() -> None:
    first, second = enqueue(mode="park"), enqueue()
    run_one()
    assert state(first) == "waiting_external" and holders("acme") == [second]
    Client().resume_external(callback_of(first), {"go": 1})
    assert state(first) == "waiting_slot"
    assert holders("acme") == [second]


def test_a_parked_job_resumed_with_a_free_slot_takes_it() -> None:
    first = enqueue(mode="park")
    run_one()
    Client().resume_external(callback_of(first), None)
    assert state(first) == "running" and holders("acme") == [first]


def test_callback_resolutions_of_a_parked_job_leave_the_slots_alone() -> None:
    first, second = enqueue(mode="park"), enqueue()
    run_one()
    Client().complete_external(callback_of(first), None)
    assert state(first) == "completed" and holders("acme") == [second]


def test_a_sequential_wait_keeps_its_slot_through_the_wait_and_the_resume() -> None:
    first, second = enqueue(), enqueue()
    (row,) = claim(queue=QUEUE)
    token = uuid.uuid4()
    jobs_sql.job_register_callback(
        id=first, run_lease=row.run_lease, callback_id=token, timeout_seconds=60
    ).run("default")
    assert jobs_sql.job_enter_wait(id=first, run_lease=row.run_lease, callback_id=token).run(
        "default"
    )
    assert state(first) == "waiting_external" and holders("acme") == [first]
    assert state(second) == "waiting_slot"
    Client().resume_external(token, {"go": 1})
    assert state(first) == "running" and holders("acme") == [first]
    assert state(second) == "waiting_slot"


def test_a_callback_timeout_of_a_sequential_wait_frees_its_slot() -> None:
    first, second = enqueue(), enqueue()
    (row,) = claim(queue=QUEUE)
    token = uuid.uuid4()
    jobs_sql.job_register_callback(
        id=first, run_lease=row.run_lease, callback_id=token, timeout_seconds=60
    ).run("default")
    jobs_sql.job_enter_wait(id=first, run_lease=row.run_lease, callback_id=token).run("default")
    Job.objects.filter(id=first).update(callback_timeout_at=transaction_now() - dt.timedelta(1))
    maintenance_sql.job_rescue_expired_callback(limit=10, message="timeout").run("default")
    assert state(first) == "retryable" and state(second) == "available"


def test_deleting_an_admitted_job_frees_its_slot() -> None:
    first, second = enqueue(), enqueue()
    Job.objects.filter(id=first).delete()
    assert state(second) == "available" and holders("acme") == [second]


def slot_writes() -> int:
    """Rows of awa_key_slots updated so far in this (the test's) transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'awa_key_slots'"
        )
        return int(cursor.fetchone()[0])


def test_a_released_slot_passes_to_the_next_waiting_job_in_one_write() -> None:
    # Migration 0017: the release writes the next job's id into the slot row it frees
    # (one UPDATE) instead of freeing it and running admission for the next job (two).
    first, second = enqueue(), enqueue()
    slot = Job.objects.get(id=first).key_slot
    before = slot_writes()
    Job.objects.filter(id=first).delete()
    assert slot_writes() - before == 1
    assert Job.objects.get(id=second).key_slot == slot and holders("acme") == [second]


# -- uniqueness, rate, overrides, the sweep ------------------------------------------------
def test_a_unique_job_waiting_for_a_slot_still_holds_its_unique_key() -> None:
    enqueue()
    waiting = enqueue(unique=UniqueOpts())
    assert state(waiting) == "waiting_slot"
    with pytest.raises(awa_django.UniqueConflict):
        enqueue(unique=UniqueOpts())


def test_a_key_rate_limit_schedules_a_job_at_the_next_token() -> None:
    first = awa_django.enqueue(KeyedRated("acme")).id
    second = awa_django.enqueue(KeyedRated("acme")).id
    assert state(first) == "available"
    job = Job.objects.get(id=second)
    assert job.state == "scheduled"
    wait = (job.run_at - transaction_now()).total_seconds()
    assert 0.5 < wait <= 1.01
    assert holders("acme") == [first]  # the scheduled one holds no slot
    # Another key has its own bucket.
    assert state(awa_django.enqueue(KeyedRated("globex")).id) == "available"


def test_a_kind_override_of_max_in_flight_applies_to_the_next_admissions() -> None:
    KeyLimit.objects.create(kind="keyed", max_in_flight=3, updated_by="ops")
    ids = [enqueue() for _ in range(4)]
    assert [state(i) for i in ids] == ["available"] * 3 + ["waiting_slot"]


def test_the_sweep_admits_waiting_jobs_when_the_max_is_raised() -> None:
    ids = [enqueue() for _ in range(4)]
    assert [state(i) for i in ids].count("available") == 1
    KeyLimit.objects.create(kind="keyed", max_in_flight=3)
    assert keys_sql.job_admit_waiting(limit=100).run("default") == 1  # one per key per pass
    assert keys_sql.job_admit_waiting(limit=100).run("default") == 1
    assert keys_sql.job_admit_waiting(limit=100).run("default") == 0
    assert [state(i) for i in ids] == ["available"] * 3 + ["waiting_slot"]


def test_lowering_the_max_lets_the_holders_finish_and_admits_no_more() -> None:
    ids = [awa_django.enqueue(KeyedPair("acme")).id for _ in range(3)]
    KeyLimit.objects.create(kind="keyed_pair", max_in_flight=1)
    run_available(QUEUE, limit=1)
    # Slot 0 was freed, but slot 1 (above the new max of 1) is still held: the waiting
    # job is not admitted, by the hand-off nor by the sweep...
    assert state(ids[2]) == "waiting_slot"
    assert holders("acme") == [ids[1]]
    assert keys_sql.job_admit_waiting(limit=100).run("default") == 0
    # ...until that holder leaves too.
    run_available(QUEUE, limit=1)
    assert state(ids[2]) == "available" and holders("acme") == [ids[2]]


def test_busiest_keys_and_the_waiting_gauge() -> None:
    for _ in range(3):
        enqueue("acme")
    enqueue("globex")
    busiest = keys_sql.key_busiest(limit=10).run("default")
    assert [(k.key, k.in_flight, k.waiting) for k in busiest] == [
        ("acme", 1, 2),
        ("globex", 1, 0),
    ]
    assert keys_sql.key_waiting_by_queue().run("default") == {QUEUE: 2}
