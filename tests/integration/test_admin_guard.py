"""The admin guard (admin/guard.py) in front of every admin page of the package (issue 26):
each ModelAdmin registered for awa_django uses it, the reported hostile URLs answer 400
before any query, and generated query strings, path segments and action selections sent
to every URL of every such admin (lists, detail, history, delete, add, the dashboard and
the other custom views) never get a 5xx, and a list answers only its declared filters."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import quote, unquote

import pytest
from django.contrib import admin
from django.contrib.admin.views.main import IGNORED_PARAMS, PAGE_VAR
from django.db import connection
from django.http import QueryDict
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, reverse
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import awa_django
from awa_django.admin.guard import GUARDED, AdminGuard, filter_parameters
from awa_django.storage.models import CronSchedule, DeadLetter, Job
from testproject.testjobs.jobs import AccNoop
from tests.factories import CronScheduleFactory, DeadLetterFactory, JobFactory
from tests.integration.test_callbacks import ParkedJobFactory

pytestmark = pytest.mark.django_db


def package_admins() -> list[Any]:
    return [
        ma for model, ma in admin.site._registry.items() if model._meta.app_label == "awa_django"
    ]


# -- every admin of the package, today's and future ones -----------------------------------
def test_every_admin_of_the_package_stands_behind_the_guard() -> None:
    admins = package_admins()
    assert {type(ma).__name__ for ma in admins} >= {
        "JobAdmin",
        "DeadLetterAdmin",
        "CronScheduleAdmin",
        "BatchAdmin",
    }
    for model_admin in admins:
        kind = type(model_admin)
        assert isinstance(model_admin, AdminGuard), kind
        # Overriding either would open a way around it.
        assert kind.lookup_allowed is AdminGuard.lookup_allowed, kind
        assert kind.urls is AdminGuard.urls, kind
        assert kind.response_action is AdminGuard.response_action, kind
        for pattern in model_admin.urls:
            assert getattr(pattern.callback, GUARDED, False), (kind, pattern)


# -- the URLs reported in issue 26 -----------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "table"),
    [
        ("/admin/awa_django/deadletter/?queue=%00", "awa_dead_letters"),
        ("/admin/awa_django/deadletter/?kind=%00", "awa_dead_letters"),
        ("/admin/awa_django/deadletter/?args__a__regex=(", "awa_dead_letters"),
        ("/admin/awa_django/deadletter/?args__contains={}", "awa_dead_letters"),
        ("/admin/awa_django/deadletter/?reason__isnull=1", "awa_dead_letters"),
        ("/admin/awa_django/deadletter/?q=a%00", "awa_dead_letters"),
        ("/admin/awa_django/deadletter/1/change/?_changelist_filters=%00", "awa_dead_letters"),
        ("/admin/awa_django/cronschedule/?name__regex=(", "awa_cron_schedules"),
        ("/admin/awa_django/cronschedule/?paused__isnull=1", "awa_cron_schedules"),
        ("/admin/awa_django/cronschedule/%00/change/", "awa_cron_schedules"),
        ("/admin/awa_django/cronschedule/%00/history/", "awa_cron_schedules"),
        ("/admin/awa_django/cronschedule/%00/delete/", "awa_cron_schedules"),
        ("/admin/awa_django/cronschedule/a%00/", "awa_cron_schedules"),
        ("/admin/awa_django/job/%00/change/", "awa_jobs_hot"),
        ("/admin/awa_django/job/dashboard/?range=%00", "awa_jobs_hot"),
        (f"/admin/awa_django/job/{2**63}/flow/", "awa_jobs_hot"),
        (f"/admin/awa_django/job/{'9' * 30}/args/", "awa_jobs_hot"),
    ],
)
def test_the_reported_urls_answer_400_before_any_query(
    admin_client: Any, url: str, table: str
) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(url)
    assert response.status_code == 400
    assert not [q for q in queries.captured_queries if f'"{table}"' in q["sql"]]


def test_one_page_for_every_refusal(admin_client: Any) -> None:
    pages = {
        admin_client.get(url).content
        for url in (
            "/admin/awa_django/job/?args__a=1",
            "/admin/awa_django/job/?q=%00",
            "/admin/awa_django/deadletter/?args__contains={}",
            "/admin/awa_django/cronschedule/%00/change/",
            "/admin/awa_django/cronschedule/?_to_field=expression",  # Django's own refusal
        )
    }
    assert len(pages) == 1, pages


@pytest.mark.parametrize(
    "url",
    [
        "/admin/awa_django/deadletter/?reason__exact=terminal_error&queue=email&kind=x",
        "/admin/awa_django/cronschedule/?paused__exact=1&missed_fire_policy__exact=coalesce",
        "/admin/awa_django/cronschedule/?q=sched&o=2&p=1",
        "/admin/awa_django/job/?state__exact=failed&queue=email&kind=x&q=tag:vip",
    ],
)
def test_declared_filters_still_work(admin_client: Any, url: str) -> None:
    DeadLetterFactory()
    CronScheduleFactory()
    assert admin_client.get(url).status_code == 200


def test_a_selection_naming_no_possible_row_is_refused(admin_client: Any) -> None:
    schedule = CronScheduleFactory()
    for model, value in (("cronschedule", "a\x00"), ("job", "abc"), ("deadletter", "1.5")):
        data = {"action": "delete_selected", "_selected_action": [value], "index": 0}
        assert admin_client.post(f"/admin/awa_django/{model}/", data).status_code == 400
    data = {"action": "pause_schedules", "_selected_action": [schedule.pk], "index": 0}
    assert (
        admin_client.post("/admin/awa_django/cronschedule/", data, follow=True).status_code == 200
    )


# -- generated requests to every URL ---------------------------------------------------------
HOSTILE = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# Percent-encoded already: NUL, lone surrogates as UTF-8 (ED A0 80, ED BF BF) and as
# overlong or broken bytes, regex metacharacters, JSON, LIKE wildcards, long numbers.
SHARP = [
    "%00", "a%00b", "%ED%A0%80", "%ED%BF%BF", "%C0%80", "%FF", "(", "%5B", "*", "%5C",
    "%7B%7D", "%5B1%5D", "%7B%22a%22%3A1%7D", "%25", "_", "null", "true", "-1", "0", "1.5",
    "9" * 30, "9" * 5000, "%C2%B2", "%E2%80%A8", "%F0%9F%98%80", "tag%3A%00", "queue%3Aa%00",
]  # fmt: skip
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=12).map(
    lambda t: quote(t, safe="")
)
values = (
    st.sampled_from(SHARP)
    | texts
    | st.lists(st.sampled_from(SHARP), min_size=2, max_size=3).map("".join)
)
# Keys: Django's own, each admin's declared filters, and lookups no list declares.
KEYS = [
    "q", "o", "p", "all", "e", "_popup", "_to_field", "_facets", "_changelist_filters",
    "range", "state__exact", "queue", "kind", "reason__exact", "paused__exact",
    "missed_fire_policy__exact", "args__contains", "args__a__regex", "name__regex",
    "metadata__k", "id__gt", "pk", "tags__contains", "state__isnull", "paused__isnull",
    "errors__0__error", "expression__iregex", "last_job_id__gte", "q%00", "%ED%A0%80",
    "concurrency", "rate", "burst", "operation",
    "max_in_flight", "finished", "finished__exact", "has_parents__exact", "batch",
]  # fmt: skip
pairs = st.lists(st.tuples(st.sampled_from(KEYS) | texts, values), max_size=3)
NOT_LOOKUPS = {*IGNORED_PARAMS, PAGE_VAR, "e"}


def routes() -> list[tuple[Any, URLPattern]]:
    """Every URL of every admin of the package, the lists five times (they run lookups)."""
    return [
        (ma, pattern)
        for ma in package_admins()
        for pattern in ma.urls
        for _ in range(5 if (pattern.name or "").endswith("_changelist") else 1)
    ]


def fill(route: str, segment: str) -> str:
    """The route (`<path:object_id>/change/`) with its converters filled in; an `<int:...>`
    one only with digits (anything else does not match it), beyond a bigint included."""
    digits = segment if segment.isascii() and segment.isdigit() else "1"
    return re.sub(r"<(?:(\w+):)?\w+>", lambda m: segment if m.group(1) != "int" else digits, route)


@pytest.fixture
def rows(db: Any) -> dict[str, str]:
    job = JobFactory(state="failed", queue="email", kind="send_receipt", tags=["vip"])
    # The job has a child, so its detail page shows its Workflow panel.
    awa_django.enqueue(AccNoop(3), after=[job.pk], on_parent_failure="run")
    return {
        "job": str(job.pk),
        "deadletter": str(DeadLetterFactory().pk),
        "cronschedule": quote(CronScheduleFactory(name="nightly.report").pk, safe=""),
        "batch": str(awa_django.batch([AccNoop(1)], on_complete=AccNoop(2))),
    }


@HOSTILE
@given(
    which=st.integers(0, 10_000),
    segment=st.sampled_from(["row", "row"]) | values,
    query=pairs,
    post=st.booleans(),
    selection=st.lists(st.sampled_from(["row"]) | values, max_size=2),
)
def test_every_admin_url_never_fails_and_lists_answer_only_declared_filters(
    admin_client: Any, admin_user: Any, rows: dict[str, str], which: int, segment: str,
    query: list[tuple[str, str]], post: bool, selection: list[str],
) -> None:  # fmt: skip
    model_admin, pattern = (choices := routes())[which % len(choices)]
    model = model_admin.model._meta.model_name
    row = rows[model]
    base = reverse(f"admin:awa_django_{model}_changelist")
    path = base + fill(str(pattern.pattern), row if segment == "row" else segment)
    url = path + ("?" + "&".join(f"{k}={v}" for k, v in query) if query else "")
    is_list = pattern.name and pattern.name.endswith("_changelist")
    if post and not is_list:  # the dashboard's forms, delete confirmations, read-only pages
        form = {field: unquote(value) for field, value in query}
        form |= {"operation": "pause", "post": "yes"} if which % 2 else {}
        response = admin_client.post(path, form)
    elif post:
        request = RequestFactory().get("/")
        request.user = admin_user
        actions = list(model_admin.get_actions(request))
        data = {
            "action": actions[which % len(actions)] if actions else "",
            "_selected_action": [row if s == "row" else s for s in selection],
            "index": 0,
            **({"select_across": 1} if which % 3 == 0 else {}),
        }
        response = admin_client.post(url, data)
    else:
        response = admin_client.get(url)
    assert response.status_code < 500, (url, response.status_code)
    event(f"{pattern.name}: {response.status_code}")
    if is_list and response.status_code == 200 and not post:
        declared = filter_parameters(model_admin, response.wsgi_request)
        lookups = {k for k in QueryDict(url.partition("?")[2]) if k not in NOT_LOOKUPS}
        assert lookups <= declared, (url, lookups)


def test_every_filter_link_the_lists_offer_passes_the_guard(admin_client: Any) -> None:
    DeadLetterFactory(queue="email", kind="send_receipt", reason="terminal_error")
    CronScheduleFactory(paused=True)
    JobFactory(state="failed", queue="email")
    for model_admin in package_admins():
        changelist = reverse(f"admin:awa_django_{model_admin.model._meta.model_name}_changelist")
        page = admin_client.get(changelist).content.decode()
        links = {html.unescape(link) for link in re.findall(r'href="(\?[^"#]*)"', page)}
        assert links, changelist
        for link in links:
            assert admin_client.get(changelist + link).status_code == 200, changelist + link


# -- "all N" asks first on every list --------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "action", "make", "changed"),
    [
        ("deadletter", "purge_dead_letters", DeadLetterFactory,
         lambda: DeadLetter.objects.count() < 3),
        ("cronschedule", "pause_schedules", CronScheduleFactory,
         lambda: CronSchedule.objects.filter(paused=True).exists()),
        ("job", "retry_callbacks", ParkedJobFactory,
         lambda: Job.objects.exclude(state="waiting_external").exists()),
    ],
)  # fmt: skip
def test_select_all_on_any_list_asks_before_acting(
    admin_client: Any, model: str, action: str, make: Any, changed: Any
) -> None:
    rows = [make() for _ in range(3)]
    url = reverse(f"admin:awa_django_{model}_changelist")
    data = {"action": action, "_selected_action": [rows[0].pk], "index": 0, "select_across": 1}
    page = admin_client.post(url, data)
    assert page.status_code == 200 and "awa-bulk-confirm" in page.content.decode()
    assert "<strong>3</strong>" in page.content.decode()
    assert not changed()
    admin_client.post(url, {**data, "apply_all": 1}, follow=True)
    assert changed()
