"""`manage.py awa_demo`: run the shop's example jobs through a real worker and report.

Starts `awa_worker` as a subprocess, enqueues the demo jobs, answers the carrier callback
with a signed HTTP request, waits for every job to finish, prints what happened and the
hook events seen, stops the worker with SIGTERM, and ensures an `admin`/`admin` superuser
(demo only) so the admin can be opened right away.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from awa_django.storage.models import Job

from ... import demo, hooks

WORKER_FLAGS = ["--promote-interval", "0.2", "--poll-interval", "0.1"]


class Command(BaseCommand):
    help = "Run the example shop jobs through a real awa_worker and print what happened."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--timeout", type=float, default=60.0, help="seconds to wait for the jobs"
        )
        parser.add_argument(
            "--no-superuser", action="store_true", help="do not create the admin/admin user"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._require_migrated()
        demo.remove_demo_schedule()  # a fresh schedule: fires count from this run
        if forgotten := demo.forget_previous_run():
            self.say(f"deleted {forgotten} job rows of an earlier demo run")
        worker = demo.WorkerProcess(WORKER_FLAGS)
        self.say(f"started worker pid {worker.process.pid}: {' '.join(worker.command[1:])}")
        try:
            run = demo.Run(demo.enqueue_plan())
            self.say("enqueued " + ", ".join(f"{r.kind} #{r.id}" for r, _ in run.jobs))
            self.say(demo.enqueue_duplicate_receipt())
            finished = demo.wait_until_done(run, worker, options["timeout"], self.say)
            self.say(demo.wait_for_schedule_fire(options["timeout"]))
            self.say(demo.wait_for_invoice_follow_up(options["timeout"]))
        finally:
            code = worker.stop()
            demo.remove_demo_schedule()
        self.say(f"worker stopped with SIGTERM, exit code {code}")
        self._report(run, worker)
        if not finished:
            self._fail_unfinished(run, worker, options["timeout"])
        if problems := run.mismatches():
            raise CommandError("unexpected outcomes:\n  " + "\n  ".join(problems))
        if not options["no_superuser"]:
            self._ensure_superuser()
        self._print_next_steps()

    def say(self, message: str) -> None:
        self.stdout.write(f"demo: {message}")

    def _require_migrated(self) -> None:
        try:
            Job.objects.exists()
        except DatabaseError as exc:
            raise CommandError(
                f"the job tables are missing; run `manage.py migrate` first ({exc})"
            ) from exc

    def _report(self, run: demo.Run, worker: demo.WorkerProcess) -> None:
        found = demo.report(run)
        rows = [row for row, _ in found.ran]
        self.stdout.write("\nJobs:\n" + demo.table(rows, [want for _, want in found.ran]))
        for note in demo.report_notes(found):
            self.stdout.write(f"  {note}")
        events = worker.hook_lines() + [f"{line}  (web)" for line in hooks.OBSERVED]
        self.stdout.write("\nHook events observed (worker, and web for the callback):")
        for line in sorted(events):
            self.stdout.write(f"  {line}")

    def _fail_unfinished(self, run: demo.Run, worker: demo.WorkerProcess, timeout: float) -> None:
        tail = "\n".join(f"  | {line}" for line in worker.lines[-40:])
        raise CommandError(
            f"jobs did not finish within {timeout:.0f} s (worker exit code "
            f"{worker.process.returncode}); worker output:\n{tail}"
        )

    def _ensure_superuser(self) -> None:
        users = get_user_model()
        if not users.objects.filter(username="admin").exists():
            users.objects.create_superuser("admin", "admin@example.com", "admin")
            self.say("created superuser admin / admin (demo only: change it)")

    def _print_next_steps(self) -> None:
        self.stdout.write(
            "\nAll demo jobs ended as expected. Open the admin:\n"
            "  make admin    serves it on this same database (python manage.py runserver)\n"
            "  http://127.0.0.1:8000/admin/                 log in as admin / admin\n"
            "  http://127.0.0.1:8000/admin/awa_django/job/  the job list\n"
            f"  {dashboard_hint()}\n"
        )


def dashboard_hint() -> str:
    from django.urls import NoReverseMatch, reverse

    try:
        return f"http://127.0.0.1:8000{reverse('admin:awa_django_dashboard')}  the dashboard"
    except NoReverseMatch:
        return "the queue dashboard is linked from the admin's Awa section"
