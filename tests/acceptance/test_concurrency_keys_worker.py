"""Per-key concurrency with real `manage.py awa_worker` processes (issue 30, decision 045):
exact across four processes, exact through a SIGKILL and its rescue, and no head-of-line
blocking behind a busy key.

Two audits, both on the database clock: a trigger this module creates records, at every
transition of a keyed job to `running`, how many jobs of its key are running (the count
the claim's transaction sees); and each handler records when it starts and ends, so the
overlap of handlers of one key is measured from committed rows, whatever the workers'
clocks.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any

import pytest
from django.db import connection

import awa_django
from awa_django.storage.models import Job, KeySlot, WorkerInstance
from testproject.testjobs.jobs import AccKeyed, AccKeyedSerial
from tests.waiting import wait_until

from .conftest import WorkerProcess

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

StartWorker = Callable[..., WorkerProcess]
QUEUE = "acc-keys"

AUDIT = """
CREATE TABLE acc_keys_audit (
    key text, job_id bigint, phase text, running int, at timestamptz DEFAULT clock_timestamp()
);
CREATE FUNCTION acc_keys_audit_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO acc_keys_audit (key, job_id, phase, running)
    SELECT NEW.args ->> 'key', NEW.id, 'claim', count(*) FROM awa_jobs_hot
    WHERE concurrency_key = NEW.concurrency_key AND state = 'running';
    RETURN NULL;
END $$;
CREATE TRIGGER acc_keys_audit AFTER UPDATE OF state ON awa_jobs_hot FOR EACH ROW
    WHEN (NEW.state = 'running' AND OLD.state <> 'running' AND NEW.concurrency_key IS NOT NULL)
    EXECUTE FUNCTION acc_keys_audit_claim();
"""
DROP_AUDIT = """
DROP TRIGGER IF EXISTS acc_keys_audit ON awa_jobs_hot;
DROP FUNCTION IF EXISTS acc_keys_audit_claim();
DROP TABLE IF EXISTS acc_keys_audit;
"""


# The orphans still running, each with whether its key's slot row still holds it.
ORPHANS = """
SELECT j.id, EXISTS (SELECT 1 FROM awa_key_slots s WHERE s.key_digest = j.concurrency_key
                     AND s.slot = j.key_slot AND s.job_id = j.id)
FROM awa_jobs_hot j WHERE j.id IN ({ids}) AND j.state = 'running'
"""


@pytest.fixture
def audit() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(DROP_AUDIT)
        cursor.execute(AUDIT)
    yield
    with connection.cursor() as cursor:
        cursor.execute(DROP_AUDIT)


def fetch(sql: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def debug(ids: list[int]) -> list[tuple[Any, ...]]:
    ids_sql = ",".join(map(str, ids))
    return fetch(
        "SELECT j.id, j.state, j.key_slot, j.run_lease, j.attempted_by, j.errors::text, "
        "(SELECT array_agg(s.slot || ':' || coalesce(s.job_id::text, '-')) FROM awa_key_slots s "
        f"WHERE s.key_digest = j.concurrency_key) FROM awa_jobs_hot j WHERE j.id IN ({ids_sql})"
    )


def backends_of(worker_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
            [f"%{worker_id}%"],
        )
        (count,) = cursor.fetchone() or (0,)
        return int(count)


def started(workers: list[WorkerProcess]) -> bool:
    return all("started:" in w.output() for w in workers)


def completed(kind_queue: str = QUEUE) -> int:
    return Job.objects.filter(queue=kind_queue, state="completed").count()


def max_claim_count() -> int:
    (row,) = fetch("SELECT coalesce(max(running), 0) FROM acc_keys_audit WHERE phase = 'claim'")
    return int(row[0])


def max_handler_overlap() -> dict[str, int]:
    """Per key, the most handlers running at once: a sweep over the start (+1) and end (-1)
    instants, ends first at a tie (an end and a start at one instant do not overlap)."""
    rows = fetch(
        "SELECT key, at, CASE phase WHEN 'start' THEN 1 ELSE -1 END FROM acc_keys_audit "
        "WHERE phase IN ('start', 'end') ORDER BY key, at, 3"
    )
    most: dict[str, int] = {}
    running: dict[str, int] = {}
    for key, _, step in rows:
        running[key] = running.get(key, 0) + step
        most[key] = max(most.get(key, 0), running[key])
    return most


def start_four(start_worker: StartWorker) -> list[WorkerProcess]:
    workers = [start_worker("--queue", f"{QUEUE}=8") for _ in range(4)]
    wait_until(lambda: started(workers), what="four workers start")
    return workers


def test_four_workers_never_run_more_than_max_in_flight_of_a_key(
    start_worker: StartWorker, audit: None
) -> None:
    """2,000 jobs over 20 keys, max_in_flight 2, four processes of 8 slots each (32 slots
    for 40 admissible jobs): never more than 2 of a key running, all complete, and the
    keys interleave (starts are not grouped key after key)."""
    workers = start_four(start_worker)
    awa_django.enqueue_many([AccKeyed(f"k{n % 20}", 0.005) for n in range(2000)])
    wait_until(lambda: completed() == 2000, timeout=240, what="2,000 keyed jobs complete")

    assert max_claim_count() <= 2
    overlap = max_handler_overlap()
    assert len(overlap) == 20 and max(overlap.values()) <= 2
    assert max(overlap.values()) == 2  # the limit was reached, not merely respected
    order = [
        r[0] for r in fetch("SELECT key FROM acc_keys_audit WHERE phase = 'start' ORDER BY at")
    ]
    switches = sum(1 for a, b in pairwise(order) if a != b)
    assert switches > 1000  # 20 keys interleaved, not run one after another
    assert not KeySlot.objects.filter(job_id__isnull=False).exists()
    for worker in workers:
        assert worker.stop() == 0


def test_a_killed_workers_slots_come_back_at_rescue_never_before(
    start_worker: StartWorker, audit: None
) -> None:
    """As above with jobs that run 0.2 s; one worker is SIGKILLed mid-run. Its attempts
    keep their keys' slots while they stay `running` (no other job of the key takes their
    place: the key's count, the dead attempt included, never passes 2) until the leader
    rescues them; then every job completes."""
    workers = start_four(start_worker)
    awa_django.enqueue_many([AccKeyed(f"k{n % 20}", 0.2) for n in range(400)])
    wait_until(lambda: completed() >= 60, timeout=120, what="the run is under way")
    victim = workers[0]
    registered = WorkerInstance.objects.filter(pid=victim.pid)
    worker_id = wait_until(
        lambda: registered.values_list("worker_id", flat=True).first(), what="registration"
    )
    victim.signal(signal.SIGKILL)
    victim.wait()
    # Its server backends may still be finishing a statement it sent (a completion's
    # commit): the orphans are what is running once they are gone.
    wait_until(lambda: not backends_of(worker_id), what="the victim's backends end")
    # The attempts the victim was running: those it claimed last (a lease row exists only
    # from an attempt's first heartbeat, decision 030).
    running = Job.objects.filter(queue=QUEUE, state="running").values_list("id", "attempted_by")
    orphans = [job_id for job_id, by in running if by and by[-1] == worker_id]
    assert orphans, "the killed worker held no running attempt"

    # Until each orphan is rescued, its slot stays its own: one statement (one snapshot)
    # reads each orphan still running and whether its slot row names it.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        still = fetch(ORPHANS.format(ids=",".join(map(str, orphans))))
        broken = [job_id for job_id, holds in still if not holds]
        assert not broken, debug(broken)
        if not still:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the orphans were never rescued")
    wait_until(lambda: completed() == 400, timeout=240, what="every job completes")

    assert max_claim_count() <= 2
    rescued = Job.objects.filter(id__in=orphans).values_list("errors", flat=True)
    assert all(any("stale" in e["error"] for e in errors) for errors in rescued)
    for worker in workers[1:]:
        assert worker.stop() == 0


def test_a_busy_key_does_not_block_the_others(start_worker: StartWorker, audit: None) -> None:
    """10,000 jobs of key A (one at a time) ahead of 10 of key B: B's ten all run while
    almost all of A's backlog still waits."""
    workers = start_four(start_worker)
    awa_django.enqueue_many([AccKeyedSerial("A", 0.05) for _ in range(10_000)])
    b_jobs = awa_django.enqueue_many([AccKeyedSerial("B", 0.0) for _ in range(10)])
    wait_until(
        lambda: Job.objects.filter(id__in=b_jobs, state="completed").count() == 10,
        timeout=60,
        what="key B's ten jobs complete",
    )
    a_done = Job.objects.filter(queue=QUEUE, args__key="A", state="completed").count()
    assert a_done < 200, a_done
    assert Job.objects.filter(queue=QUEUE, args__key="A", state="waiting_slot").count() > 9000
    for worker in workers:
        worker.kill()
