"""The surfaces of cron schedules: `manage.py awa_cron`, the admin's schedule list and its
actions (with and without the permission), the dashboard's link, and the system check."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client as HttpClient
from django.urls import reverse

from awa_django.checks import check_schedules
from awa_django.cron import MissedFirePolicy
from awa_django.registry import Registry, registry
from awa_django.registry.schedules import ScheduleDefinition
from awa_django.storage.models import CronSchedule, Job

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:awa_django_cronschedule_changelist"


@pytest.fixture
def schedule() -> CronSchedule:
    return CronSchedule.objects.create(
        name="nightly",
        expression="30 2 * * *",
        timezone="Europe/Berlin",
        kind="acc_noop",
        args={"n": 1},
        queue="acc",
    )


def awa_cron(*args: str) -> str:
    out = io.StringIO()
    call_command("awa_cron", *args, stdout=out)
    return out.getvalue()


# -- awa_cron -----------------------------------------------------------------------------
def test_awa_cron_lists_schedules_with_their_next_fire(schedule: CronSchedule) -> None:
    lines = awa_cron("list").splitlines()
    header, row = lines[0].split(), lines[1].split()
    assert header[:5] == ["NAME", "EXPRESSION", "TIMEZONE", "STATE", "POLICY"]
    # STATE says whether it fires (active/paused); POLICY its missed-fire policy.
    assert row[0] == "nightly" and row[-5:-3] == ["active", "coalesce"]
    assert "+01:00" in lines[1] or "+02:00" in lines[1]  # the next fire, in Berlin time


def test_awa_cron_pause_resume_trigger_remove(schedule: CronSchedule) -> None:
    assert awa_cron("pause", "nightly") == "paused nightly\n"
    schedule.refresh_from_db()
    assert schedule.paused and schedule.paused_by == "awa_cron"
    assert awa_cron("list").splitlines()[1].split()[-5:-3] == ["paused", "coalesce"]
    assert awa_cron("resume", "nightly") == "resumed nightly\n"
    job_id = Job.objects.get(id=int(awa_cron("trigger", "nightly").split()[-1])).id
    assert CronSchedule.objects.get().last_job_id == job_id
    assert awa_cron("remove", "nightly") == "removed nightly\n"
    assert awa_cron("list").startswith("no cron schedules")


def test_awa_cron_reports_an_unknown_or_missing_name() -> None:
    with pytest.raises(CommandError, match="no cron schedule named 'nope'"):
        awa_cron("pause", "nope")
    with pytest.raises(CommandError, match="needs the schedule's name"):
        awa_cron("trigger")


# -- admin --------------------------------------------------------------------------------
def login(client: HttpClient, django_user_model: Any, *codenames: str) -> None:
    user = django_user_model.objects.create_user(
        f"op-{uuid.uuid4().hex[:8]}", password="pw", is_staff=True
    )
    wanted = {"view_cronschedule", "view_job", *codenames}
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="awa_django", codename__in=wanted)
    )
    client.force_login(user)


def test_admin_lists_schedules_with_next_fire_and_the_last_job_linked(
    client: HttpClient, django_user_model: Any, schedule: CronSchedule
) -> None:
    login(client, django_user_model)
    job = Job.objects.create(kind="acc_noop", queue="acc")
    CronSchedule.objects.filter(name="nightly").update(last_job_id=job.id)
    page = client.get(reverse(CHANGELIST)).content.decode()
    assert "nightly" in page and "30 2 * * *" in page and "Europe/Berlin" in page
    assert reverse("admin:awa_django_job_change", args=[job.id]) in page
    assert "Pause selected schedules" not in page  # without manage_schedule: no actions


def test_admin_actions_call_the_client(
    client: HttpClient, django_user_model: Any, schedule: CronSchedule
) -> None:
    login(client, django_user_model, "manage_schedule")

    def act(action: str) -> str:
        data = {"action": action, "_selected_action": ["nightly"], "index": 0}
        response = client.post(reverse(CHANGELIST), data, follow=True)
        return " ".join(str(m) for m in response.context["messages"])

    assert act("pause_schedules") == "1 schedule paused"
    assert CronSchedule.objects.get().paused_by.startswith("op-")
    assert act("resume_schedules") == "1 schedule resumed"
    assert act("trigger_schedules") == "1 schedule triggered"
    job = Job.objects.get()
    assert job.metadata["cron_name"] == "nightly" and job.metadata["triggered_manually"]
    assert act("remove_schedules") == "1 schedule removed"
    assert not CronSchedule.objects.exists()


def test_admin_refuses_the_actions_without_the_permission(
    client: HttpClient, django_user_model: Any, schedule: CronSchedule
) -> None:
    login(client, django_user_model)
    data = {"action": "pause_schedules", "_selected_action": ["nightly"], "index": 0}
    client.post(reverse(CHANGELIST), data)
    assert not CronSchedule.objects.get().paused


def test_dashboard_links_to_the_schedules(client: HttpClient, django_user_model: Any) -> None:
    login(client, django_user_model)
    page = client.get(reverse("admin:awa_django_dashboard")).content.decode()
    assert reverse(CHANGELIST) in page


# -- system check -------------------------------------------------------------------------
def test_check_reports_a_schedule_that_cannot_be_evaluated_and_one_without_a_handler() -> None:
    # Definitions built directly: periodic() would refuse the bad zone at declaration.
    reg = Registry()
    reg.add_job(_acc_noop_definition())
    reg.add_schedule(ScheduleDefinition("good", "0 2 * * *", "UTC", "acc_noop", "{}"))
    reg.add_schedule(ScheduleDefinition("bad-zone", "0 2 * * *", "Mars/Base", "acc_noop", "{}"))
    reg.add_schedule(
        ScheduleDefinition(
            "orphan",
            "*/5 * * * * *",
            "UTC",
            "nobody_handles",
            "{}",
            missed_fire_policy=MissedFirePolicy.CATCH_UP,
        )
    )
    problems = check_schedules(schedules=reg)
    assert [(p.id, "bad-zone" in p.msg or "orphan" in p.msg) for p in problems] == [
        ("awa.E020", True),
        ("awa.W020", True),
    ]
    assert "unknown timezone" in problems[0].msg


def _acc_noop_definition() -> Any:
    return registry.job("acc_noop")
