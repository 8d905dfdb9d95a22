"""The job admin: list, search and filters with a bounded number of queries, the read-only
detail page, each action with and without its permission, CSRF, and the dashboard."""

from __future__ import annotations

import datetime as dt
import html
import re
import select
import time
import uuid
from typing import Any

import factory
import psycopg
import pytest
from django.contrib.auth.models import Permission
from django.contrib.staticfiles import finders
from django.db import connection
from django.test import Client as HttpClient
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from awa_django.admin import actions as admin_actions
from awa_django.client.client import Client
from awa_django.keys import KEY_METADATA
from awa_django.states import JobState
from awa_django.storage.models import ActiveLease, Job, QueueState, WorkerInstance
from tests.factories import JobFactory, ModelFactory

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:awa_django_job_changelist"
DASHBOARD = "admin:awa_django_dashboard"
QUEUE_OPERATION = "admin:awa_django_queue_operation"


class WorkerInstanceFactory(ModelFactory[WorkerInstance]):
    class Meta:
        model = WorkerInstance

    worker_id = factory.Sequence(lambda n: f"worker-{n}")
    hostname = "web-1.internal"
    pid = factory.Sequence(lambda n: 4000 + n)
    queues = factory.LazyFunction(lambda: {"default": 10, "email": 4})


@pytest.fixture
def operator(django_user_model):
    """Log in a staff user holding view_job plus the given permission codenames."""

    def login(client: HttpClient, *codenames: str) -> Any:
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


def run_action(client: HttpClient, action: str, jobs: list[Job], **extra: Any) -> Any:
    data = {"action": action, "_selected_action": [j.pk for j in jobs], "index": 0, **extra}
    return client.post(reverse(CHANGELIST), data, follow=True)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def states(*jobs: Job) -> list[str]:
    return [Job.objects.get(pk=j.pk).state for j in jobs]


def parked(**kwargs: Any) -> Job:
    return JobFactory(state="waiting_external", callback_id=uuid.uuid4(), attempt=1, **kwargs)


# -- list -------------------------------------------------------------------------------
def test_list_shows_columns_and_escaped_truncated_last_error(admin_client):
    long_error = "<b>boom</b> " + "x" * 200
    job = JobFactory(state="failed", attempt=3, max_attempts=3, errors=[{"error": long_error}])

    page = admin_client.get(reverse(CHANGELIST)).content.decode()

    assert f">{job.pk}<" in page
    assert 'class="awa-badge awa-state-failed"' in page
    assert "3/3" in page
    assert "&lt;b&gt;boom&lt;/b&gt;" in page and "<b>boom</b>" not in page
    # 80 characters: the 12 of "<b>boom</b> " and 68 x, then the ellipsis
    assert "x" * 68 + "…" in page and "x" * 69 not in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"state__exact": "failed"}, {"failed_email"}),
        ({"queue": "email"}, {"failed_email", "tagged"}),
        ({"kind": "charge_card"}, {"tagged"}),
        ({"q": "tag:vip"}, {"tagged"}),
        ({"q": "vip"}, set()),  # a plain word is a kind; tags need tag:
        ({"q": "charge_card"}, {"tagged"}),
        ({"q": "queue:email"}, {"failed_email", "tagged"}),
    ],
)
def test_list_filters_and_search(admin_client, django_assert_max_num_queries, query, expected):
    jobs = {
        "failed_email": JobFactory(queue="email", state="failed", kind="send_receipt"),
        "tagged": JobFactory(queue="email", kind="charge_card", tags=["vip"]),
        "plain": JobFactory(queue="default"),
    }
    with django_assert_max_num_queries(10):
        response = admin_client.get(reverse(CHANGELIST), query)
    shown = {j.pk for j in response.context["cl"].result_list}
    assert shown == {jobs[name].pk for name in expected}


def test_search_by_id_and_by_callback_id(admin_client):
    job = parked()
    other = JobFactory()
    by_id = admin_client.get(reverse(CHANGELIST), {"q": str(other.pk)})
    by_callback = admin_client.get(reverse(CHANGELIST), {"q": str(job.callback_id)})
    too_big = admin_client.get(reverse(CHANGELIST), {"q": "9" * 30})
    assert [j.pk for j in by_id.context["cl"].result_list] == [other.pk]
    assert [j.pk for j in by_callback.context["cl"].result_list] == [job.pk]
    assert list(too_big.context["cl"].result_list) == []


def test_list_query_count_does_not_grow_with_rows(admin_client, django_assert_max_num_queries):
    JobFactory.create_batch(60, errors=[{"error": "e"}], args={"blob": "y" * 5000})
    with django_assert_max_num_queries(10):
        response = admin_client.get(reverse(CHANGELIST))
    assert len(response.context["cl"].result_list) == 50
    assert "args" in response.context["cl"].result_list[0].get_deferred_fields()


# -- the query string: declared lookups only, never a 500, never a table scan --------------
def jobs_queries(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if '"awa_jobs_hot"' in q["sql"]]


@pytest.mark.parametrize("term", ["²", "١٢", "1²", "9" * 5000, "queue:²"])
def test_search_with_odd_digits_finds_nothing_instead_of_failing(admin_client, term):
    # "²".isdigit() is true but int("²") raises, and int() refuses 4,301 digits: each
    # used to be a 500. Only ASCII digits are an id; anything else is a kind (or queue).
    JobFactory()
    response = admin_client.get(reverse(CHANGELIST), {"q": term})
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


@pytest.mark.parametrize("term", ["\x00", "12\x00", "queue:\x00", "tag:a\x00"])
def test_search_with_a_nul_is_refused_before_any_query(admin_client, term):
    # PostgreSQL would fail the query. Django's search form would drop the term and list
    # the whole table under a message (and an action posted there would act on all of
    # it): the admin guard refuses it as it refuses any other bad value (issue 26).
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(reverse(CHANGELIST), {"q": term})
    assert response.status_code == 400
    assert jobs_queries(queries) == []


def test_search_by_a_superscript_digit_is_a_kind_search(admin_client):
    job = JobFactory(kind="²")
    response = admin_client.get(reverse(CHANGELIST), {"q": "²"})
    assert [j.pk for j in response.context["cl"].result_list] == [job.pk]


@pytest.mark.parametrize(
    "query",
    [
        "args__a=1",
        "metadata__k__regex=(",
        "errors__0__error=boom",
        "id__gt=0",
        "kind__startswith=send",
        "state=failed",
        "state__isnull=1",
        "callback_id__isnull=False",
        "tags__contains=vip",
        "queue=%00",
        "kind=a%00b",
        "state__exact=%00",
        "queue=email&args__a=1",
    ],
)
def test_lookups_other_than_the_declared_filters_are_refused_before_any_query(admin_client, query):
    JobFactory(queue="email")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(reverse(CHANGELIST) + "?" + query)
    assert response.status_code == 400
    assert jobs_queries(queries) == []


@pytest.mark.parametrize(
    ("o", "direction"),
    # Columns: 0 the action checkbox, 1 id, 2 kind, 3 queue, 4 state, ..., 6 run_at.
    [("2", "DESC"), ("3", "DESC"), ("-6", "DESC"), ("2.6.1", "ASC"), ("1", "ASC"),
     ("-1", "DESC"), ("--1", "DESC"), ("0", "DESC"), ("x", "DESC"), ("99", "DESC")],
)  # fmt: skip
def test_the_list_sorts_by_id_only_whatever_o_says(admin_client, o, direction):
    # Django would sort by any list_display column with a model field behind it (kind,
    # queue, run_at): a sort of the whole table. Only id is declared sortable.
    jobs = [JobFactory(kind=kind, queue=queue) for kind, queue in [("b", "z"), ("a", "y")]]
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(reverse(CHANGELIST), {"o": o})
    assert response.status_code == 200
    [listing] = [sql for sql in jobs_queries(queries) if "ORDER BY" in sql]
    assert listing.split("ORDER BY ")[1].split(" LIMIT")[0] == f'"awa_jobs_hot"."id" {direction}'
    ids = sorted(j.pk for j in jobs)
    shown = [j.pk for j in response.context["cl"].result_list]
    assert shown == (ids if direction == "ASC" else ids[::-1])


def test_every_link_the_list_and_dashboard_offer_is_allowed(admin_client):
    JobFactory(queue="email", kind="send_receipt", state="failed")
    pages = [admin_client.get(reverse(name)).content.decode() for name in (CHANGELIST, DASHBOARD)]
    links = {html.unescape(link) for page in pages for link in QUERY_LINK.findall(page)}
    assert any("state__exact=" in link for link in links) and any("kind=" in link for link in links)
    for link in links:
        assert admin_client.get(reverse(CHANGELIST) + link).status_code == 200, link


QUERY_LINK = re.compile(r'href="(?:/admin/awa_django/job/)?(\?[^"#]*)"')


def test_filter_choices_come_from_config_and_registry_not_a_table_scan(admin_client):
    JobFactory(kind="some_kind_nobody_registered", queue="ad_hoc")
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "?queue=email" in page and "?kind=send_receipt" in page
    assert "?kind=some_kind_nobody_registered" not in page and "?queue=ad_hoc" not in page
    filtered = admin_client.get(reverse(CHANGELIST), {"kind": "some_kind_nobody_registered"})
    assert "?kind=some_kind_nobody_registered" in filtered.content.decode()


def test_large_result_shows_an_estimated_count(admin_client, monkeypatch):
    from awa_django.admin.paginator import EstimatedCountPaginator

    monkeypatch.setattr(EstimatedCountPaginator, "exact_limit", 5)
    JobFactory.create_batch(8)
    response = admin_client.get(reverse(CHANGELIST))
    assert response.context["cl"].paginator.is_estimate
    assert "about " in response.content.decode()


# -- detail ------------------------------------------------------------------------------
def test_detail_escapes_and_truncates_large_args_with_a_link_to_the_whole(admin_client):
    args = {"a_html": "<script>alert(1)</script>", "blob": "z" * 20_000}
    job = JobFactory(args=args)

    page = admin_client.get(reverse("admin:awa_django_job_change", args=[job.pk])).content
    text = page.decode()

    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<script>alert(1)</script>" not in text
    assert "z" * 20_000 not in text and "Shown: the first 10000 characters" in text
    whole_url = reverse("admin:awa_django_job_args", args=[job.pk])
    assert whole_url in text
    whole = admin_client.get(whole_url)
    assert whole["Content-Type"] == "application/json"
    assert whole.json() == args


def test_detail_shows_errors_progress_lease_and_timeline(admin_client):
    now = timezone.now()
    job = JobFactory(
        state="running",
        attempt=2,
        run_lease=7,
        attempted_at=now,
        progress={"percent": 40, "message": "<i>half</i> way"},
        errors=[{"error": "Traceback…\nValueError: <bad>", "attempt": 1, "at": now.isoformat()}],
    )
    ActiveLease.objects.create(
        job_id=job.pk, run_lease=7, queue="default", worker_id="worker-xyz", deadline_at=now
    )

    text = admin_client.get(reverse("admin:awa_django_job_change", args=[job.pk])).content.decode()

    assert '<pre class="awa-error">Traceback…\nValueError: &lt;bad&gt;</pre>' in text
    assert 'style="width: 40.0%"' in text and "&lt;i&gt;half&lt;/i&gt; way" in text
    assert "worker-xyz" in text
    assert "attempt 1 error: ValueError: &lt;bad&gt;" in text and "attempt 2 started" in text
    assert "created" in text


def test_detail_of_a_running_job_before_its_first_heartbeat_names_its_worker(admin_client):
    """Decision 030: the lease row comes with the attempt's first heartbeat."""
    job = JobFactory(
        state="running",
        attempt=2,
        run_lease=8,
        attempted_at=timezone.now(),
        attempted_by=["worker-before", "worker-early"],
    )
    # The previous attempt's lease, left behind: not this attempt's.
    ActiveLease.objects.create(job_id=job.pk, run_lease=7, queue="default", worker_id="old-w")
    text = admin_client.get(reverse("admin:awa_django_job_change", args=[job.pk])).content.decode()
    assert "claimed by worker-early" in text and "no heartbeat yet" in text
    assert "no live lease" not in text and "old-w" not in text


def test_detail_is_read_only_and_cannot_delete_live_jobs(admin_client):
    job = JobFactory(state="running")
    change = admin_client.get(reverse("admin:awa_django_job_change", args=[job.pk]))
    assert 'name="_save"' not in change.content.decode()
    assert (
        admin_client.post(reverse("admin:awa_django_job_change", args=[job.pk])).status_code == 403
    )
    assert admin_client.get(reverse("admin:awa_django_job_add")).status_code == 403
    delete = reverse("admin:awa_django_job_delete", args=[job.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


def test_terminal_jobs_can_be_deleted_one_by_one_but_not_in_bulk(admin_client):
    job = JobFactory(state="completed")
    response = admin_client.get(reverse(CHANGELIST))
    assert (
        "delete_selected" not in response.context["action_form"].fields["action"].choices.__str__()
    )
    admin_client.post(reverse("admin:awa_django_job_delete", args=[job.pk]), {"post": "yes"})
    assert not Job.objects.filter(pk=job.pk).exists()


# -- retry / cancel ------------------------------------------------------------------------
def test_retry_with_permission_retries_and_reports_skipped(client, operator):
    operator(client, "retry_job")
    failed = JobFactory.create_batch(2, state="failed", attempt=3)
    others = [JobFactory(state=s) for s in ("available", "running", "completed")]

    response = run_action(client, "retry_jobs", failed + others)

    assert messages_of(response) == [
        "2 jobs retried; 3 skipped: not failed, cancelled, retryable or waiting_external"
    ]
    assert states(*failed) == ["available", "available"]
    assert states(*others) == ["available", "running", "completed"]
    assert Job.objects.get(pk=failed[0].pk).attempt == 0


def test_retry_without_permission_is_not_offered_and_changes_nothing(client, operator):
    operator(client, "cancel_job")
    job = JobFactory(state="failed")

    page = client.get(reverse(CHANGELIST)).content.decode()
    response = run_action(client, "retry_jobs", [job])

    assert 'value="retry_jobs"' not in page and 'value="cancel_jobs"' in page
    assert states(job) == ["failed"]
    assert not any("retried" in m for m in messages_of(response))


def test_cancel_with_permission_cancels_and_reports_skipped(client, operator):
    operator(client, "cancel_job")
    live = [JobFactory(state="available"), JobFactory(state="scheduled"), parked()]
    done = JobFactory(state="completed")

    response = run_action(client, "cancel_jobs", [*live, done])

    assert messages_of(response) == [
        "3 jobs cancelled; 1 skipped: already completed, failed or cancelled"
    ]
    assert states(*live, done) == ["cancelled", "cancelled", "cancelled", "completed"]


def test_cancel_without_permission_changes_nothing(client, operator):
    operator(client, "retry_job")
    job = JobFactory(state="available")
    run_action(client, "cancel_jobs", [job])
    assert states(job) == ["available"]


@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_running_job_signals_its_worker(client, operator):
    """The admin goes through Client.cancel_many, which tells the running attempt's worker
    on `awa_cancel` in the cancelling transaction."""
    operator(client, "cancel_job")
    job = JobFactory(state="running", run_lease=3)
    ActiveLease.objects.create(job_id=job.pk, run_lease=3, queue="default", worker_id="w")
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute('LISTEN "awa_cancel"')
        run_action(client, "cancel_jobs", [job])
        payloads = wait_for_notifies(listener, deadline=5.0)
    assert states(job) == ["cancelled"]
    assert not ActiveLease.objects.filter(job_id=job.pk).exists()
    assert any(f'"job_id" : {job.pk}' in p or f'"job_id": {job.pk}' in p for p in payloads)


def wait_for_notifies(conn: psycopg.Connection[Any], deadline: float) -> list[str]:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        select.select([conn.fileno()], [], [], max(end - time.monotonic(), 0))
        found = [n.payload for n in conn.notifies(timeout=0, stop_after=10)]
        if found:
            return found
    return []


def test_an_oversized_selection_is_refused(client, operator, monkeypatch):
    operator(client, "retry_job")
    monkeypatch.setattr(admin_actions, "MAX_BULK", 2)
    jobs = JobFactory.create_batch(3, state="failed")
    response = run_action(client, "retry_jobs", jobs)
    assert messages_of(response) == ["Select at most 2 jobs for this action."]
    assert states(*jobs) == ["failed"] * 3


# -- callback actions ------------------------------------------------------------------------
def test_complete_callback_asks_for_a_payload_then_completes(client, operator):
    operator(client, "complete_callback")
    job, other = parked(), JobFactory(state="available")

    form_page = run_action(client, "complete_callbacks", [job, other])
    assert form_page.status_code == 200
    assert 'name="payload"' in form_page.content.decode()
    assert states(job) == ["waiting_external"]

    bad = run_action(client, "complete_callbacks", [job, other], apply=1, payload="{not json")
    assert "Enter a valid JSON." in bad.content.decode()
    assert states(job) == ["waiting_external"]

    done = run_action(client, "complete_callbacks", [job, other], apply=1, payload='{"ok": 1}')
    assert messages_of(done) == [
        "1 callback completed; 1 skipped: not waiting_external or callback already resolved"
    ]
    assert states(job, other) == ["completed", "available"]


def test_fail_callback_requires_an_error_text(client, operator):
    operator(client, "fail_callback")
    job = parked()

    empty = run_action(client, "fail_callbacks", [job], apply=1, error="   ")
    assert "This field is required." in empty.content.decode()
    assert states(job) == ["waiting_external"]

    done = run_action(client, "fail_callbacks", [job], apply=1, error="partner said no")
    assert messages_of(done) == ["1 callback failed"]
    row = Job.objects.get(pk=job.pk)
    assert row.state == "failed"
    assert row.errors[-1]["error"] == "partner said no" and row.errors[-1]["terminal"]


def test_retry_callback_makes_the_job_available(client, operator):
    operator(client, "retry_callback")
    job = parked()
    response = run_action(client, "retry_callbacks", [job])
    assert messages_of(response) == ["1 callback retried"]
    row = Job.objects.get(pk=job.pk)
    assert (row.state, row.attempt, row.callback_id) == ("available", 0, None)


@pytest.mark.parametrize(
    ("action", "extra"),
    [
        ("complete_callbacks", {"apply": 1, "payload": ""}),
        ("fail_callbacks", {"apply": 1, "error": "no"}),
        ("retry_callbacks", {}),
    ],
)
def test_callback_actions_without_permission_change_nothing(client, operator, action, extra):
    operator(client, "retry_job", "cancel_job")
    job = parked()
    page = client.get(reverse(CHANGELIST)).content.decode()
    response = run_action(client, action, [job], **extra)
    assert f'value="{action}"' not in page
    assert response.status_code == 200
    assert states(job) == ["waiting_external"]


def test_a_callback_resolved_meanwhile_counts_as_skipped(client, operator, monkeypatch):
    """Between the selection and the Client call another resolver wins: the Client raises
    CallbackNotFound and the action reports the job as skipped."""
    operator(client, "retry_callback")
    first, second = parked(), parked()

    class RacingClient(Client):
        def retry_external(self, callback_id: uuid.UUID | str) -> Any:
            if callback_id == second.callback_id:
                Client(self.using).complete_external(callback_id)  # the other resolver
            return super().retry_external(callback_id)

    monkeypatch.setattr(admin_actions, "_client", lambda: RacingClient("default"))
    response = run_action(client, "retry_callbacks", [first, second])

    assert messages_of(response) == [
        "1 callback retried; 1 skipped: not waiting_external or callback already resolved"
    ]
    assert states(first, second) == ["available", "completed"]


# -- CSRF ----------------------------------------------------------------------------------
def test_actions_and_queue_buttons_enforce_csrf(operator):
    csrf_client = HttpClient(enforce_csrf_checks=True)
    operator(csrf_client, "retry_job", "pause_queue")
    job = JobFactory(state="failed")

    action = csrf_client.post(
        reverse(CHANGELIST), {"action": "retry_jobs", "_selected_action": [job.pk], "index": 0}
    )
    pause = csrf_client.post(reverse(QUEUE_OPERATION), {"queue": "email", "operation": "pause"})

    assert (action.status_code, pause.status_code) == (403, 403)
    assert states(job) == ["failed"]
    assert not QueueState.objects.filter(paused=True).exists()


# -- dashboard -------------------------------------------------------------------------------
def test_dashboard_shows_queue_figures_and_live_workers(client, operator):
    operator(client, "pause_queue")
    JobFactory.create_batch(3, queue="email", state="available")
    JobFactory(queue="email", state="completed", finalized_at=timezone.now())
    WorkerInstanceFactory(hostname="web-1.internal", pid=4242, leader=True)
    WorkerInstanceFactory(hostname="stale", last_seen_at=timezone.now() - dt.timedelta(hours=1))

    response = client.get(reverse(DASHBOARD))
    text = response.content.decode()

    email = next(q for q in response.context["queues"] if q["name"] == "email")
    assert dict((s, n) for s, n, _ in email["depth"])["available"] == 3
    assert email["completed_last_minute"] == 1
    assert "queue=email&amp;state__exact=available" in text
    assert "web-1.internal" in text and "4242" in text and "default=10, email=4" in text
    assert "stale" not in text
    assert 'value="pause"' in text


def test_dashboard_lists_kinds_no_live_worker_handles(client, operator):
    operator(client)
    WorkerInstanceFactory(hostname="old-1", kinds=["send_receipt"], hooks_dropped=12)
    JobFactory(kind="send_receipt")
    JobFactory.create_batch(3, kind="new_in_this_deploy", state="scheduled")

    response = client.get(reverse(DASHBOARD))
    text = response.content.decode()

    assert [(r["kind"], r["waiting"]) for r in response.context["unhandled"]] == [
        ("new_in_this_deploy", 3)
    ]
    assert "Kinds no live worker handles" in text and "?kind=new_in_this_deploy" in text
    assert ">12<" in text  # the worker's dropped hook events


def test_dashboard_lists_the_busiest_concurrency_keys(client, operator):
    operator(client)
    assert "Busiest concurrency keys" not in client.get(reverse(DASHBOARD)).content.decode()
    for _ in range(3):
        JobFactory(metadata={KEY_METADATA: {"key": "tenant-<b>7</b>", "max": 1}})

    response = client.get(reverse(DASHBOARD))
    text = response.content.decode()

    keys = [(k.key, k.in_flight, k.waiting) for k in response.context["busiest_keys"]]
    assert keys == [("tenant-<b>7</b>", 1, 2)]
    assert "Busiest concurrency keys" in text
    assert "tenant-&lt;b&gt;7&lt;/b&gt;" in text  # escaped, like every stored text


@pytest.mark.django_db
def test_dashboard_hides_buttons_without_pause_permission(client, operator):
    operator(client)
    text = client.get(reverse(DASHBOARD)).content.decode()
    assert "awa-queues" in text and 'value="pause"' not in text


def test_dashboard_is_staff_only(client, django_user_model):
    assert client.get(reverse(DASHBOARD)).status_code == 302
    client.force_login(django_user_model.objects.create_user("civilian", password="pw"))
    assert client.get(reverse(DASHBOARD)).status_code == 302


def test_pause_and_resume_from_the_dashboard(client, operator):
    user = operator(client, "pause_queue")
    url = reverse(QUEUE_OPERATION)

    paused = client.post(url, {"queue": "email", "operation": "pause"}, follow=True)
    state = QueueState.objects.get(queue="email")
    assert (state.paused, state.paused_by) == (True, user.username)
    assert messages_of(paused) == ["Queue email paused: workers claim no new jobs from it."]
    assert 'value="resume"' in paused.content.decode()

    client.post(url, {"queue": "email", "operation": "resume"})
    assert QueueState.objects.get(queue="email").paused is False


def test_queue_buttons_refuse_without_permission_bad_names_and_get(client, operator):
    operator(client)
    url = reverse(QUEUE_OPERATION)
    assert client.post(url, {"queue": "email", "operation": "pause"}).status_code == 403
    assert not QueueState.objects.exists()

    client.logout()
    operator(client, "pause_queue")
    assert client.get(url).status_code == 405
    bad = client.post(url, {"queue": "bad name", "operation": "pause"}, follow=True)
    assert messages_of(bad)[0].startswith("Queue not changed:")
    assert not QueueState.objects.exists()


def test_app_index_and_job_list_link_to_the_dashboard(admin_client):
    dashboard = reverse(DASHBOARD)
    assert (
        dashboard
        in admin_client.get(reverse("admin:app_list", args=["awa_django"])).content.decode()
    )
    assert dashboard in admin_client.get(reverse(CHANGELIST)).content.decode()


def test_every_state_has_its_colour_in_the_admin_stylesheet() -> None:
    # The badge, the dashboard's depth links and the list's summary bar are coloured by
    # `awa-state-<state>`: a state without its rule showed as plain text in the bar.
    css = (finders.find("awa_django/admin.css") or "").strip()
    with open(css, encoding="utf-8") as f:
        rules = set(re.findall(r"\.awa-state-(\w+)\s*\{", f.read()))
    assert set(JobState.values) <= rules, set(JobState.values) - rules
