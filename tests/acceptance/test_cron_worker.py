"""Cron schedules fired by real worker processes: schedules firing every second keep
firing each second exactly once, under the real leader's pass jitter and while the leader
is SIGKILLed and another takes over (the compare-and-swap fire, decision 013), whatever
their missed-fire policy: a failover is shorter than the grace (decision 034)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from awa_django.storage.models import Job, LeaderLease
from testproject.testjobs.jobs import CRON_EVERY_SECOND, CRON_EVERY_SECOND_COALESCE
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

CRON = {"AWA_TEST_CRON": "1"}


def fire_times(name: str = CRON_EVERY_SECOND) -> list[dt.datetime]:
    rows = Job.objects.filter(metadata__cron_name=name)
    return sorted(
        dt.datetime.fromisoformat(m["cron_fire_time"])
        for m in rows.values_list("metadata", flat=True)
    )


def span(times: list[dt.datetime]) -> float:
    return (times[-1] - times[0]).total_seconds() if times else 0.0


def test_every_second_fires_once_across_a_leader_kill(start_worker):
    workers = {
        name: start_worker("--queue", "acc=4", "--worker-id", name, env=CRON) for name in ("a", "b")
    }
    leader = wait_until(lambda: LeaderLease.objects.first(), what="a leader").holder
    wait_until(lambda: span(fire_times()) >= 9, timeout=40, what="ten seconds of fires")
    workers[leader].kill()  # SIGKILL: no release, the lease has to expire (--leader-ttl 1)
    killed_at = time.monotonic()
    other = "b" if leader == "a" else "a"
    wait_until(
        lambda: LeaderLease.objects.filter(holder=other).exists(), timeout=10, what="failover"
    )
    took_over = time.monotonic() - killed_at
    wait_until(lambda: span(fire_times()) >= 20, timeout=40, what="twenty seconds of fires")
    workers[other].kill()

    for name in (CRON_EVERY_SECOND, CRON_EVERY_SECOND_COALESCE):
        times = fire_times(name)
        assert len(times) == len(set(times)), f"{name}: a second fired twice"
        # Both policies: the failover gap is within the grace, so the new leader enqueued
        # its seconds, and every second from the first fire to the last has its job.
        expected = [times[0] + dt.timedelta(seconds=i) for i in range(len(times))]
        assert times == expected, f"{name}: missing seconds (failover took {took_over:.1f}s)"
        assert len(times) >= 20
        jobs = Job.objects.filter(metadata__cron_name=name)
        assert jobs.values("id").distinct().count() == len(times)
