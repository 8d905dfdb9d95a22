"""The admin's concurrency keys page (admin/key_limits.py): keyed kinds with their declared
and overridden per-key limits and busiest keys, and the form that sets and clears a kind's
override through the Client, under the queue limits permission."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

import awa_django
from awa_django.storage.models import KeyLimit
from tests.integration.test_concurrency_keys import Keyed, KeyedPair

pytestmark = pytest.mark.django_db

PAGE = "admin:awa_django_keys"
FORM = "admin:awa_django_key_limits"


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    def login(client: Any, *codenames: str) -> Any:
        user = django_user_model.objects.create_user(
            f"op-{uuid.uuid4().hex[:8]}", password="pw", is_staff=True
        )
        wanted = {"view_job", *codenames}
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="awa_django", codename__in=wanted)
        )
        client.force_login(user)
        return user

    return login


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_the_page_lists_keyed_kinds_with_declared_limits_and_busiest_keys(
    client: Any, operator: Any
) -> None:
    operator(client)
    for _ in range(3):
        awa_django.enqueue(KeyedPair("acme"))
    awa_django.enqueue(KeyedPair("globex"))
    page = client.get(reverse(PAGE)).content.decode()
    row = page.split("<td>keyed_pair</td>")[1].split("</tr>")[0]
    assert "max 2 in flight, no rate limit" in row
    # acme: two admitted of max 2, one waiting; globex: one admitted, busiest first.
    assert row.index("acme: 2 / 1") < row.index("globex: 1 / 0")
    assert "<td>unkeyed</td>" not in page
    assert 'id="awa-key-limits-form"' not in page  # no permission to set limits
    dashboard = client.get(reverse("admin:awa_django_dashboard")).content.decode()
    assert reverse(PAGE) in dashboard


def test_the_form_sets_shows_and_clears_a_kind_override(client: Any, operator: Any) -> None:
    user = operator(client, "set_queue_limits")
    assert 'id="awa-key-limits-form"' in client.get(reverse(PAGE)).content.decode()
    done = client.post(
        reverse(FORM),
        {"kind": "keyed_pair", "operation": "set", "max_in_flight": "5", "rate": "2", "burst": "4"},
        follow=True,
    )
    row = KeyLimit.objects.get(kind="keyed_pair")
    assert (row.max_in_flight, row.rate, row.burst, row.updated_by) == (5, 2, 4, user.username)
    assert messages_of(done)[0].startswith("Kind keyed_pair: new key limits apply")
    assert f"max 5 in flight, 2/s (burst 4) by {user.username}" in done.content.decode()
    # Admission follows the override: four slots of one key (declared: 2), then the
    # bucket of burst 4 is empty and the rest are scheduled at the next token.
    jobs = [awa_django.enqueue(KeyedPair("acme")) for _ in range(6)]
    assert [j.state for j in jobs] == ["available"] * 4 + ["scheduled"] * 2

    cleared = client.post(reverse(FORM), {"kind": "keyed_pair", "operation": "clear"}, follow=True)
    assert not KeyLimit.objects.filter(kind="keyed_pair").exists()
    assert messages_of(cleared)[0].startswith("Kind keyed_pair: key overrides cleared")


def test_an_override_of_a_kind_not_registered_here_is_listed(client: Any, operator: Any) -> None:
    operator(client, "set_queue_limits")
    client.post(reverse(FORM), {"kind": "elsewhere", "operation": "set", "max_in_flight": "3"})
    page = client.get(reverse(PAGE)).content.decode()
    row = page.split("<td>elsewhere</td>")[1].split("</tr>")[0]
    assert "not registered here" in row and "max 3 in flight, rate declared" in row


def test_the_form_needs_its_permission_and_post(client: Any, operator: Any) -> None:
    operator(client, "pause_queue")
    data = {"kind": "keyed_pair", "operation": "set", "max_in_flight": "3"}
    assert client.post(reverse(FORM), data).status_code == 403
    client.logout()
    operator(client, "set_queue_limits")
    assert client.get(reverse(FORM)).status_code == 405
    assert not KeyLimit.objects.exists()


@pytest.mark.parametrize(
    "bad",
    [
        {"max_in_flight": "0"},
        {"max_in_flight": "1001"},
        {"max_in_flight": "two"},
        {"burst": "3"},
        {"rate": "-1"},
        {"rate": "nan"},
        {"rate": "inf"},
        {"kind": ""},
        {"kind": "k" * 201},
        {"kind": "nul\x00"},
        {"operation": "drop"},
    ],
    ids=repr,
)
def test_each_bad_value_is_a_message_never_a_500(
    client: Any, operator: Any, bad: dict[str, str]
) -> None:
    operator(client, "set_queue_limits")
    data = {"kind": "keyed_pair", "operation": "set", **bad}
    response = client.post(reverse(FORM), data, follow=True)
    assert response.status_code == 200
    assert messages_of(response)[0].startswith("Key limits not changed"), messages_of(response)
    assert not KeyLimit.objects.exists()


def test_the_client_reads_one_kinds_busiest_keys_and_every_override() -> None:
    from awa_django import Client
    from awa_django.snapshot import KeyFigures

    for tenant in ("acme", "acme", "acme", "globex"):
        awa_django.enqueue(KeyedPair(tenant))
    awa_django.enqueue(Keyed("acme"))  # another kind on the same key: not counted
    client = Client()
    assert client.busiest_keys(10, kind="keyed_pair") == [
        KeyFigures("acme", 2, 1),
        KeyFigures("globex", 1, 0),
    ]
    assert client.busiest_keys(1, kind="keyed_pair") == [KeyFigures("acme", 2, 1)]
    assert client.busiest_keys(10, kind="nobody") == []
    with pytest.raises(awa_django.InvalidEnqueueOption):
        client.busiest_keys(10, kind="")
    client.set_key_limits("keyed_pair", max_in_flight=4, by="ops")
    assert {k: (r.max_in_flight, r.updated_by) for k, r in client.key_overrides().items()} == {
        "keyed_pair": (4, "ops")
    }
