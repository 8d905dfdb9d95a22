"""Cron schedules as operators see and steer them: list, pause, resume, trigger, remove.

The `Client`'s schedule verbs call these functions with its database alias; each joins the
caller's transaction. Declaring and firing schedules is not here: `periodic(...)` declares
them (registry) and the worker's leader syncs and fires them (decision 013).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models.functions import Now

from awa_django.codec import storable_text, unstorable_character
from awa_django.cron import upcoming_fire
from awa_django.exceptions import ScheduleNotFound
from awa_django.snapshot import JobSnapshot, ScheduleSnapshot
from awa_django.storage.sql import cron as cron_sql

if TYPE_CHECKING:
    import datetime as dt

    from awa_django.storage.models import CronSchedule

MAX_PAUSED_BY_CHARS = 200  # awa_cron_schedules.paused_by is varchar(200)


def schedules(using: str) -> list[ScheduleSnapshot]:
    """Every schedule in the table, by name."""
    model = _model()
    rows = model.objects.using(using).annotate(db_now=Now()).order_by("name")
    return [_snapshot(row, row.db_now) for row in rows]


def schedule(using: str, name: str) -> ScheduleSnapshot:
    _check_name(name)
    model = _model()
    row = model.objects.using(using).annotate(db_now=Now()).filter(name=name).first()
    if row is None:
        raise ScheduleNotFound(f"no cron schedule named {name!r}")
    return _snapshot(row, row.db_now)


def pause(using: str, name: str, by: str) -> ScheduleSnapshot:
    """Stop firing `name` until resumed; its last fire time stays, so on resume its
    missed-fire policy decides what the paused time enqueues. Idempotent."""
    _check_name(name)
    paused_by = storable_text(str(by))[:MAX_PAUSED_BY_CHARS]
    changed = (
        _model()
        .objects.using(using)
        .filter(name=name, paused=False)
        .update(paused=True, paused_at=Now(), paused_by=paused_by, updated_at=Now())
    )
    if not changed:
        schedule(using, name)  # ScheduleNotFound, unless it was already paused
    return schedule(using, name)


def resume(using: str, name: str) -> ScheduleSnapshot:
    """Fire `name` again. The fires due while it was paused count as missed (its policy
    decides), however short the pause: `resumed_at` marks them (decision 034). Idempotent:
    resuming an active schedule changes nothing."""
    _check_name(name)
    changed = (
        _model()
        .objects.using(using)
        .filter(name=name, paused=True)
        .update(paused=False, paused_at=None, paused_by="", resumed_at=Now(), updated_at=Now())
    )
    if not changed:
        schedule(using, name)  # ScheduleNotFound, unless it was not paused
    return schedule(using, name)


def trigger(using: str, name: str) -> JobSnapshot:
    """Enqueue one job of `name` now (paused or not), leaving its fire sequence alone."""
    _check_name(name)
    job = cron_sql.cron_schedule_trigger(name=name).run(using)
    if job is None:
        raise ScheduleNotFound(f"no cron schedule named {name!r}")
    return job


def remove(using: str, name: str) -> None:
    """Delete the row. A process that still declares `name` re-creates it at its next
    sync (as a new schedule: no back-fill), so remove the declaration first."""
    _check_name(name)
    deleted, _ = _model().objects.using(using).filter(name=name).delete()
    if not deleted:
        raise ScheduleNotFound(f"no cron schedule named {name!r}")


def _check_name(name: object) -> None:
    """A name no schedule can have (not text, or text PostgreSQL cannot store) is not
    found, said before any SQL: the database would refuse it with its own error."""
    if not isinstance(name, str) or unstorable_character(name) is not None:
        raise ScheduleNotFound(f"no cron schedule named {name!r}")


def _snapshot(row: CronSchedule, now: dt.datetime) -> ScheduleSnapshot:
    return ScheduleSnapshot(
        name=row.name,
        expression=row.expression,
        timezone=row.timezone,
        kind=row.kind,
        args=row.args,
        queue=row.queue,
        priority=row.priority,
        max_attempts=row.max_attempts,
        missed_fire_policy=row.missed_fire_policy,
        paused=row.paused,
        paused_at=row.paused_at,
        paused_by=row.paused_by,
        last_fire_at=row.last_fire_at,
        last_job_id=row.last_job_id,
        next_fire_at=None if row.paused else _upcoming(row, now),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _upcoming(row: CronSchedule, now: dt.datetime) -> dt.datetime | None:
    return upcoming_fire(
        row.expression, row.timezone, row.missed_fire_policy, row.last_fire_at, row.created_at, now
    )


def _model() -> type[CronSchedule]:
    """Imported on first use: `awa_django` imports the Client before Django may have
    loaded the models (see client._figures)."""
    from awa_django.storage.models import CronSchedule

    return CronSchedule
