"""Fires cron schedules: syncs the declared ones into `awa_cron_schedules` and, every
second, enqueues each due fire through the compare-and-swap statement (decision 013).

Due fires are computed from the database clock in each schedule's zone (`awa_django.cron`);
the leader's own clock is never read. A pass that runs late enqueues every fire it owes;
only fires older than one pass plus `CRON_GRACE`, or due while the schedule was paused,
count as missed and go by the missed-fire policy (decision 034). Safety does not rest on
leadership: two processes that briefly both lead compute the same fire, and only one
compare-and-swap applies.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable

from awa_django.conf import awa_settings
from awa_django.cron import (
    MissedFirePolicy,
    check_expression,
    check_timezone,
    due_fires,
    missed_before,
)
from awa_django.exceptions import InvalidSchedule
from awa_django.registry import registry
from awa_django.registry.schedules import ScheduleDefinition
from awa_django.snapshot import JobSnapshot
from awa_django.storage.query import Query
from awa_django.storage.sql import cron as cron_sql
from awa_django.worker.database import Database

logger = logging.getLogger("awa_django.worker")


class CronScheduler:
    def __init__(
        self,
        db: Database,
        declared: Callable[[], list[ScheduleDefinition]] = registry.schedules,
        *,
        missed_after: float | None = None,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        """`missed_after`: seconds after which a fire counts as missed (default
        CRON_INTERVAL + CRON_GRACE). `clock`: None reads the database clock, as production
        must; tests pass a controlled one to place passes at chosen instants."""
        self.db = db
        self.declared = declared
        if missed_after is None:
            settings = awa_settings()
            missed_after = settings.cron_interval + settings.cron_grace
        self.missed_after = dt.timedelta(seconds=missed_after)
        self.clock = clock
        self._invalid: set[tuple[str, str, str]] = set()  # logged once each

    async def sync(self) -> list[str]:
        """Upsert this process's declared schedules; returns the names inserted or changed.
        Never deletes: removing a schedule is explicit (`Client.remove_schedule`)."""
        definitions = self.declared()
        if not definitions:
            return []
        changed = await self.db.run(_upsert(definitions))
        if changed:
            logger.info("cron schedules synced: %s", ", ".join(changed))
        return changed

    async def run_once(self) -> list[JobSnapshot]:
        """Enqueue every due fire of every unpaused schedule; returns the jobs enqueued."""
        enqueued: list[JobSnapshot] = []
        for schedule in await self.db.run(cron_sql.cron_schedule_list_unpaused()):
            enqueued += await self._fire_due(schedule)
        return enqueued

    async def _fire_due(self, schedule: cron_sql.ScheduleState) -> list[JobSnapshot]:
        fires = self._due(schedule)
        expected = schedule.last_fire_at
        jobs: list[JobSnapshot] = []
        for fire_at in fires:
            job = await self.db.run(
                cron_sql.cron_schedule_fire(
                    name=schedule.name,
                    expected_last=expected,
                    fire_at=fire_at,
                    fire_time=fire_at.isoformat(),
                )
            )
            if job is None:  # another leader fired it, or it was paused or removed meanwhile
                logger.info("cron schedule %s: fire at %s already taken", schedule.name, fire_at)
                break
            logger.info("cron schedule %s fired for %s: job %s", schedule.name, fire_at, job.id)
            jobs.append(job)
            expected = fire_at
        return jobs

    def _due(self, schedule: cron_sql.ScheduleState) -> list[dt.datetime]:
        try:
            expression = check_expression(schedule.expression)
            zone = check_timezone(schedule.timezone)
            policy = MissedFirePolicy(schedule.missed_fire_policy)
        except (InvalidSchedule, ValueError) as exc:
            # A row written by another deployment that this one cannot evaluate: skip it.
            key = (schedule.name, schedule.expression, schedule.timezone)
            if key not in self._invalid:
                self._invalid.add(key)
                logger.error("cron schedule %s cannot be evaluated: %s", schedule.name, exc)
            return []
        now = schedule.now if self.clock is None else self.clock()
        after = schedule.last_fire_at or schedule.created_at
        missed = missed_before(now, self.missed_after, schedule.resumed_at)
        return due_fires(expression, zone, after, now, policy, missed=missed)


def _upsert(definitions: list[ScheduleDefinition]) -> Query[list[str]]:
    options = [d.job_options() for d in definitions]
    return cron_sql.cron_schedule_upsert_many(
        names=[d.name for d in definitions],
        expressions=[d.expression for d in definitions],
        timezones=[d.timezone for d in definitions],
        kinds=[d.kind for d in definitions],
        args=[d.args for d in definitions],
        queues=[queue for queue, _, _ in options],
        priorities=[priority for _, priority, _ in options],
        max_attempts=[attempts for _, _, attempts in options],
        tags=[json.dumps(list(d.tags)) for d in definitions],
        metadata=[d.job_metadata() for d in definitions],
        policies=[str(d.missed_fire_policy) for d in definitions],
    )
