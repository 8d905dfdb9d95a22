"""`python manage.py awa_cron list|pause|resume|trigger|remove [NAME]`: see and steer cron
schedules through the Client (docs/cron.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from awa_django.client import Client, ScheduleSnapshot
from awa_django.exceptions import ScheduleNotFound

VERBS = ("list", "pause", "resume", "trigger", "remove")


class Command(BaseCommand):
    help = "List cron schedules, or pause, resume, trigger or remove one by name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("verb", choices=VERBS)
        parser.add_argument("name", nargs="?", help="the schedule (all verbs but list)")
        parser.add_argument("--by", default="awa_cron", help="who pauses (recorded)")
        parser.add_argument("--database", default=None, help="database alias (default: AWA)")

    def handle(self, *args: Any, **options: Any) -> None:
        client = Client(options["database"])
        verb, name = options["verb"], options["name"]
        if verb == "list":
            self.stdout.write(_table(client.schedules()))
            return
        if not name:
            raise CommandError(f"awa_cron {verb} needs the schedule's name")
        try:
            self.stdout.write(_run(client, verb, name, options["by"]))
        except ScheduleNotFound as exc:
            raise CommandError(str(exc)) from exc


def _run(client: Client, verb: str, name: str, by: str) -> str:
    if verb == "pause":
        client.pause_schedule(name, by=by)
        return f"paused {name}"
    if verb == "resume":
        client.resume_schedule(name)
        return f"resumed {name}"
    if verb == "trigger":
        return f"triggered {name}: job {client.trigger_schedule(name).id}"
    client.remove_schedule(name)
    return f"removed {name}"


def _table(schedules: list[ScheduleSnapshot]) -> str:
    if not schedules:
        return "no cron schedules (a worker's leader syncs the declared ones)"
    rows = [
        ("NAME", "EXPRESSION", "TIMEZONE", "STATE", "POLICY", "LAST FIRE", "NEXT FIRE", "LAST JOB")
    ]
    rows += [
        (
            s.name,
            s.expression,
            s.timezone,
            "paused" if s.paused else "active",
            s.missed_fire_policy,
            _when(s.last_fire_at),
            _when(s.next_fire_at),
            "-" if s.last_job_id is None else str(s.last_job_id),
        )
        for s in schedules
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


def _when(moment: dt.datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(timespec="seconds")
