"""The dead letters in the admin: the read-only list and its filters, the detail page with
the error history, the retry and purge actions with and without their permission, and
the dashboard's dead-letter depth per queue."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client as HttpClient
from django.urls import reverse

from awa_django.storage.models import DeadLetter, Job
from awa_django.unique import UniqueOpts
from tests.factories import DeadLetterFactory, JobFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:awa_django_deadletter_changelist"
DASHBOARD = "admin:awa_django_dashboard"


@pytest.fixture
def operator(django_user_model):
    """Log in a staff user who may view jobs and dead letters, plus `codenames`."""

    def login(client: HttpClient, *codenames: str) -> Any:
        user = django_user_model.objects.create_user(
            f"op-{uuid.uuid4().hex[:8]}", password="pw", is_staff=True
        )
        wanted = {"view_job", "view_deadletter", *codenames}
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="awa_django", codename__in=wanted)
        )
        client.force_login(user)
        return user

    return login


def run_action(client: HttpClient, action: str, letters: list[DeadLetter]) -> Any:
    data = {"action": action, "_selected_action": [d.pk for d in letters], "index": 0}
    return client.post(reverse(CHANGELIST), data, follow=True)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_the_list_shows_dead_letters_and_filters_by_reason_queue_and_kind(client, operator):
    operator(client)
    a = DeadLetterFactory(kind="charge_card", queue="payments", reason="terminal_error")
    DeadLetterFactory(kind="send_receipt", queue="email")
    page = client.get(reverse(CHANGELIST))
    assert page.status_code == 200
    assert {row.pk for row in page.context["cl"].result_list} == set(
        DeadLetter.objects.values_list("id", flat=True)
    )
    for query in ("?reason__exact=terminal_error", "?queue=payments", "?kind=charge_card"):
        filtered = client.get(reverse(CHANGELIST) + query)
        assert [row.pk for row in filtered.context["cl"].result_list] == [a.pk], query
    assert 'value="retry_dead_letters"' not in page.content.decode()  # no permission


def test_the_detail_page_shows_the_error_history_read_only(client, operator):
    operator(client)
    letter = DeadLetterFactory(errors=[{"error": "first <b>boom</b>", "attempt": 1}])
    page = client.get(reverse("admin:awa_django_deadletter_change", args=[letter.pk]))
    text = page.content.decode()
    assert page.status_code == 200
    assert "first &lt;b&gt;boom&lt;/b&gt;" in text and 'name="_save"' not in text


def test_retry_with_permission_puts_jobs_back_and_reports_conflicts(client, operator):
    operator(client, "retry_dead_letter")
    mask = UniqueOpts().states_mask
    free = DeadLetterFactory()
    held = DeadLetterFactory(unique_key=b"a" * 16, unique_states=mask)
    JobFactory(unique_key=b"a" * 16, unique_states=mask)
    response = run_action(client, "retry_dead_letters", [free, held])
    assert messages_of(response) == [
        "1 dead letter retried; 1 skipped: a live job holds their unique key, or they were "
        "already gone"
    ]
    assert Job.objects.get(id=free.id).state == "available"
    assert list(DeadLetter.objects.values_list("id", flat=True)) == [held.id]


def test_retry_without_permission_changes_nothing(client, operator):
    operator(client, "purge_dead_letter")
    letter = DeadLetterFactory()
    run_action(client, "retry_dead_letters", [letter])
    assert DeadLetter.objects.filter(id=letter.id).exists()
    assert not Job.objects.filter(id=letter.id).exists()


def test_purge_with_and_without_permission(client, operator):
    operator(client, "retry_dead_letter")
    letter = DeadLetterFactory()
    run_action(client, "purge_dead_letters", [letter])
    assert DeadLetter.objects.filter(id=letter.id).exists()
    operator(client, "purge_dead_letter")
    response = run_action(client, "purge_dead_letters", [letter])
    assert messages_of(response) == ["1 dead letter purged"]
    assert not DeadLetter.objects.exists()


def test_the_dashboard_shows_dead_letter_depth_per_queue(client, operator):
    operator(client)
    DeadLetterFactory.create_batch(2, queue="payments")
    response = client.get(reverse(DASHBOARD))
    rows = response.context["dead_letters"]
    assert [(r["queue"], r["count"]) for r in rows] == [("payments", 2)]
    assert client.get(rows[0]["url"]).status_code == 200
    assert 'id="awa-dead-letters"' in response.content.decode()
