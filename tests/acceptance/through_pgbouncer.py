"""The application side of tests/acceptance/test_pgbouncer.py, run as its own process so
that Django's default connection goes through PgBouncer (DATABASE_URL points at it,
DATABASE_POOLED=1): enqueue in atomic(), a callback, a django.tasks task and the admin.
A worker (another process, also through PgBouncer) claims and completes. Prints one line
per step; exits non-zero on the first failed step.

    DATABASE_URL=postgres://…@127.0.0.1:<pgbouncer>/db DATABASE_POOLED=1 \\
        python -m tests.acceptance.through_pgbouncer
"""

from __future__ import annotations

import os
from typing import Any

import django

from tests.waiting import wait_until


def step(name: str) -> None:
    print(f"ok: {name}", flush=True)


class Rollback(Exception):
    pass


def enqueue_in_atomic() -> int:
    from django.db import transaction

    import awa_django
    from testproject.shop.jobs import SendReceipt

    with transaction.atomic():
        receipt = awa_django.enqueue(SendReceipt(order_id=7001))
    try:
        with transaction.atomic():
            ghost = awa_django.enqueue(SendReceipt(order_id=7002))
            raise Rollback
    except Rollback:
        pass
    client = awa_django.Client()
    try:
        client.get_job(ghost.id)
        raise AssertionError("a rolled-back enqueue left a job")
    except awa_django.JobNotFound:
        pass
    wait_until(
        lambda: client.get_job(receipt.id).state == "completed", 30, "the worker to complete"
    )
    step("enqueue in atomic(), rollback leaves nothing, the worker claims and completes")
    return receipt.id


def callback_round_trip() -> None:
    import awa_django
    from testproject.shop.jobs import RequestShippingLabel

    client = awa_django.Client()
    label = awa_django.enqueue(RequestShippingLabel(order_id=7003))

    def parked_callback() -> Any:
        row = client.get_job(label.id)
        return row.callback_id if row.state == "waiting_external" else None

    callback_id = wait_until(parked_callback, 30, "the job to park on its callback")
    done = client.complete_external(callback_id, {"tracking": "PB-1"})
    assert done.state == "completed", done.state
    step("a parked job's callback resolves")


def django_task() -> None:
    from awa_django.tasks.framework import TaskResultStatus
    from tests.tasks_for_tests import add

    result = add.enqueue(2, 3)

    def finished() -> bool:
        result.refresh()
        return result.status == TaskResultStatus.SUCCESSFUL

    wait_until(finished, 30, "the django task to succeed")
    assert result.return_value == 5, result.return_value
    step("a django.tasks task runs")


def admin(receipt_id: int) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client as HttpClient

    import awa_django
    from testproject.shop.jobs import SendReceipt

    user = get_user_model().objects.create_superuser("bouncer", "b@example.com", "pw")
    http = HttpClient()
    http.force_login(user)
    for url in (
        "/admin/awa_django/job/",
        f"/admin/awa_django/job/{receipt_id}/change/",
        "/admin/awa_django/job/dashboard/",
    ):
        response = http.get(url)
        assert response.status_code == 200, (url, response.status_code)
    later = awa_django.enqueue(SendReceipt(order_id=7004), run_at=_in_an_hour())
    data: dict[str, Any] = {"action": "cancel_jobs", "_selected_action": [later.id], "index": 0}
    response = http.post("/admin/awa_django/job/", data, follow=True)
    assert response.status_code == 200, response.status_code
    assert awa_django.Client().get_job(later.id).state == "cancelled"
    step("the admin lists, shows, dashboards and cancels")


def _in_an_hour() -> Any:
    from datetime import timedelta

    from django.utils import timezone

    return timezone.now() + timedelta(hours=1)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()
    from django.db import connection

    settings = connection.settings_dict
    assert str(settings["PORT"]) == os.environ["PGBOUNCER_PORT"], settings["PORT"]
    assert settings.get("DISABLE_SERVER_SIDE_CURSORS") is True
    step(f"Django connects through PgBouncer on port {settings['PORT']}")
    receipt_id = enqueue_in_atomic()
    callback_round_trip()
    django_task()
    admin(receipt_id)
    print("all steps passed", flush=True)


if __name__ == "__main__":
    main()
