"""Workflows in the admin (issue 29, item 5): a job's parents, children and batch on its
detail page, the flow page of a chain, a group and a fan-in too large to show whole, the
batch list and detail with their counts; and `Client.job_flow()` under them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

import awa_django
from awa_django import Client
from awa_django.exceptions import InvalidFlowQuery, JobNotFound
from awa_django.snapshot import DEAD_LETTERED
from awa_django.storage.models import DeadLetter, Job
from testproject.testjobs.jobs import AccNoop

pytestmark = pytest.mark.django_db


def detail(admin_client: Any, job_id: int) -> str:
    response = admin_client.get(reverse("admin:awa_django_job_change", args=[job_id]))
    assert response.status_code == 200
    return str(response.content.decode())


def flow_page(admin_client: Any, job_id: int) -> str:
    response = admin_client.get(reverse("admin:awa_django_job_flow", args=[job_id]))
    assert response.status_code == 200
    return str(response.content.decode())


def flow_rows(page: str) -> list[tuple[int, str, int]]:
    """(job id, state, generation) of each row of the flow table, in order."""
    rows = re.findall(
        r'<tr class="awa-flow-node[^"]*" data-job="(\d+)" data-state="(\w+)">\s*'
        r'<td class="awa-num">(\d+)</td>',
        page,
    )
    return [(int(job), state, int(generation)) for job, state, generation in rows]


def complete(*job_ids: int) -> None:
    """Complete jobs as a worker would: the fan-in trigger runs on the state change."""
    Job.objects.filter(id__in=job_ids).update(state="completed", attempt=1)


# -- the detail page --------------------------------------------------------------------------
def test_a_child_lists_its_parents_with_links_states_and_what_it_waits_for(
    admin_client: Any,
) -> None:
    a, b = awa_django.enqueue(AccNoop(1)), awa_django.enqueue(AccNoop(2))
    child = awa_django.enqueue(AccNoop(3), after=[a, b], on_parent_failure="run")
    complete(a.id)
    page = detail(admin_client, child.id)
    assert "Workflow" in page
    panel = page[page.index("field-flow_parents") :]
    for parent, state in ((a, "completed"), (b, "available")):
        link = reverse("admin:awa_django_job_change", args=[parent.id])
        assert re.search(rf'<a href="{link}">#{parent.id}</a> <span class="[^"]*">{state}<', panel)
    assert "1 of 2 parents not ended, 0 failed; if one fails: <code>run</code>" in panel
    assert re.search(r'awa-state-waiting_parents">waiting_parents<', page)


def test_a_parent_lists_its_children_and_links_its_flow(admin_client: Any) -> None:
    parent = awa_django.enqueue(AccNoop(1))
    children = [awa_django.enqueue(AccNoop(n), after=[parent]) for n in (2, 3)]
    page = detail(admin_client, parent.id)
    panel = page[page.index("field-flow_children") :]
    for child in children:
        assert f'">#{child.id}</a>' in panel
    flow_url = reverse("admin:awa_django_job_flow", args=[parent.id])
    assert f'href="{flow_url}" id="awa-flow-link"' in panel
    assert "no parents" in page


def test_a_job_outside_any_flow_has_no_workflow_panel(admin_client: Any) -> None:
    job = awa_django.enqueue(AccNoop(1))
    plain = detail(admin_client, job.id)
    awa_django.enqueue(AccNoop(2), after=[job])
    assert "field-flow_parents" not in plain
    assert "field-flow_parents" in detail(admin_client, job.id)


def test_a_fan_in_child_lists_twenty_parents_and_counts_the_rest(admin_client: Any) -> None:
    parents = awa_django.enqueue_many([AccNoop(i) for i in range(25)])
    child = awa_django.enqueue(AccNoop(-1), after=parents)
    page = detail(admin_client, child.id)
    panel = page[page.index("field-flow_parents") : page.index("field-flow_children")]
    assert panel.count("<li>") == 20
    assert "and 5 more parents" in panel


# -- the flow page ----------------------------------------------------------------------------
def test_a_chain_shows_one_job_per_generation(admin_client: Any) -> None:
    first, second, third = awa_django.chain(AccNoop(1), AccNoop(2), AccNoop(3))
    rows = flow_rows(flow_page(admin_client, second.id))
    assert rows == [
        (first.id, "available", 0),
        (second.id, "waiting_parents", 1),
        (third.id, "waiting_parents", 2),
    ]


def test_a_group_and_its_child_show_the_members_then_the_child(admin_client: Any) -> None:
    made = awa_django.group(AccNoop(1), AccNoop(2), AccNoop(3)).then(AccNoop(4))
    complete(made.members[0].id)
    page = flow_page(admin_client, made.members[1].id)
    rows = flow_rows(page)
    assert [(job, generation) for job, _, generation in rows] == [
        *((m.id, 0) for m in made.members),
        (made.child.id, 1),
    ]
    assert rows[0][1] == "completed"
    assert "awa-flow-more" not in page


def test_a_flow_larger_than_the_page_says_there_is_more(admin_client: Any) -> None:
    parents = awa_django.enqueue_many([AccNoop(i) for i in range(250)])
    child = awa_django.enqueue(AccNoop(-1), after=parents)
    page = flow_page(admin_client, child.id)
    assert len(flow_rows(page)) == 200
    assert 'id="awa-flow-more"' in page
    assert "has 250 parents and 0 children" in page


def test_a_dead_lettered_parent_links_to_its_dead_letter(admin_client: Any) -> None:
    parent = awa_django.enqueue(AccNoop(1))
    child = awa_django.enqueue(AccNoop(2), after=[parent], on_parent_failure="run")
    row = Job.objects.get(id=parent.id)
    DeadLetter.objects.create(
        id=row.id, kind=row.kind, queue=row.queue, created_at=row.created_at, reason="manual"
    )
    Job.objects.filter(id=parent.id).delete()
    [node] = Client().job_flow(child.id).parents
    assert node.state == DEAD_LETTERED
    link = reverse("admin:awa_django_deadletter_change", args=[parent.id])
    assert f'<a href="{link}">#{parent.id}</a>' in flow_page(admin_client, child.id)


def test_the_flow_page_of_no_job_is_404(admin_client: Any) -> None:
    assert admin_client.get(reverse("admin:awa_django_job_flow", args=[10**12])).status_code == 404


# -- batches ----------------------------------------------------------------------------------
def test_the_batch_list_and_detail_show_counts_callbacks_and_members(admin_client: Any) -> None:
    batch = awa_django.batch(
        [AccNoop(i) for i in range(60)], on_success=AccNoop(-1), on_complete=AccNoop(-2)
    )
    members = Client().batch_members(batch)
    complete(*members[:3])
    Job.objects.filter(id=members[3]).update(state="failed", attempt=1)
    listing = admin_client.get(reverse("admin:awa_django_batch_changelist")).content.decode()
    assert "4 of 60" in listing
    page = admin_client.get(reverse("admin:awa_django_batch_change", args=[batch]))
    text = page.content.decode()
    assert page.status_code == 200 and "4 of 60" in text
    progress = Client().batch_progress(batch)
    for name, job_id in (("on_success", progress.on_success_id),
                         ("on_complete", progress.on_complete_id)):  # fmt: skip
        link = reverse("admin:awa_django_job_change", args=[job_id])
        assert re.search(rf'<code>{name}</code> <a href="{link}">#{job_id}</a>', text)
    assert text.count("awa-state-completed") >= 3 and "and 10 more" in text
    flow = reverse("admin:awa_django_job_flow", args=[progress.on_success_id])
    assert f'<a href="{flow}" id="awa-batch-flow">' in text
    member_page = detail(admin_client, members[0])
    batch_link = reverse("admin:awa_django_batch_change", args=[batch])
    assert f'<a href="{batch_link}">batch {batch}</a>: 4 of 60 ended (3 completed, 1 failed' in (
        member_page
    )


def test_the_batch_list_filters_finished_batches(admin_client: Any) -> None:
    done = awa_django.batch([AccNoop(1)])
    open_ = awa_django.batch([AccNoop(2)])
    complete(*Client().batch_members(done))
    url = reverse("admin:awa_django_batch_changelist")
    finished = admin_client.get(url, {"finished": "yes"}).content.decode()
    unfinished = admin_client.get(url, {"finished": "no"}).content.decode()
    change = "admin:awa_django_batch_change"
    assert reverse(change, args=[done]) in finished
    assert reverse(change, args=[open_]) not in finished
    assert reverse(change, args=[open_]) in unfinished


# -- the Client's read under them -------------------------------------------------------------
def test_job_flow_refuses_bad_bounds_and_unknown_jobs() -> None:
    client = Client()
    with pytest.raises(JobNotFound):
        client.job_flow(10**12)
    for bad in ({"limit": 0}, {"depth": 0}, {"limit": True}, {"limit": 10**6}):
        with pytest.raises(InvalidFlowQuery):
            client.job_flow(1, **bad)
    with pytest.raises(InvalidFlowQuery):
        client.job_flow("1")  # type: ignore[arg-type]
    with pytest.raises(InvalidFlowQuery):
        client.job_nodes([0])


def test_job_flow_reads_a_bounded_number_of_statements(django_assert_max_num_queries: Any) -> None:
    ids = awa_django.enqueue_many([AccNoop(i) for i in range(300)])
    chained = awa_django.chain(*(AccNoop(i) for i in range(10)))
    child = awa_django.enqueue(AccNoop(-1), after=[*ids, chained[-1]])
    with django_assert_max_num_queries(9):
        flow = Client().job_flow(child.id, limit=50, depth=1)
    assert flow.truncated and len(flow.nodes) == 50 and flow.parent_count == 301
    # Depth bounds it too: from the chain's head, one edge away is one job.
    near = Client().job_flow(chained[0].id, depth=1)
    assert [n.id for n in near.nodes] == [chained[0].id, chained[1].id] and near.truncated


def test_the_batch_pages_name_batches_in_words(admin_client: Any) -> None:
    """Core gap (reported to the lead): the Batch model has no verbose_name_plural (the
    admin says "Batchs") and no __str__ (the detail title says "Batch object (1)"). The
    plural is a model option, so its fix needs the core's migration."""
    batch = awa_django.batch([AccNoop(1)])
    index = admin_client.get(reverse("admin:app_list", args=["awa_django"])).content.decode()
    assert ">Batches<" in index and ">Batchs<" not in index
    page = admin_client.get(reverse("admin:awa_django_batch_change", args=[batch]))
    assert "Batch object" not in page.content.decode()


def test_job_flow_puts_each_job_one_generation_after_its_latest_parent() -> None:
    """A diamond with a shortcut: d waits on b (generation 1) and on a (0), so it is 2."""
    a = awa_django.enqueue(AccNoop(1))
    b = awa_django.enqueue(AccNoop(2), after=[a])
    c = awa_django.enqueue(AccNoop(3), after=[a])
    d = awa_django.enqueue(AccNoop(4), after=[b, c, a])
    flow = Client().job_flow(c.id)
    assert [(n.id, n.generation) for n in flow.nodes] == [(a.id, 0), (b.id, 1), (c.id, 1),
                                                          (d.id, 2)]  # fmt: skip
    assert not flow.truncated and flow.node(d.id).parents == (a.id, b.id, c.id)  # type: ignore[union-attr]
    assert [n.id for n in flow.children] == [d.id] and [n.id for n in flow.parents] == [a.id]


# -- cancelling flows and batches from the admin ----------------------------------------------
@pytest.fixture
def operator(django_user_model: Any, client: Any) -> Any:
    """A staff user who may view jobs and batches, plus `codenames`; logged in."""

    def login(*codenames: str) -> Any:
        user = django_user_model.objects.create_user("op", password="pw", is_staff=True)
        wanted = {"view_job", "view_batch", *codenames}
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="awa_django", codename__in=wanted)
        )
        client.force_login(user)
        return client

    return login


def test_cancel_with_waiting_children_cancels_the_rest_of_the_chain(operator: Any) -> None:
    client = operator("cancel_job")
    head, middle, tail = awa_django.chain(AccNoop(1), AccNoop(2), AccNoop(3))
    plain = awa_django.enqueue(AccNoop(4))
    assert 'id="awa-act-cancel_flows"' in detail(client, head.id)
    assert 'id="awa-act-cancel_flows"' not in detail(client, plain.id)
    url = reverse("admin:awa_django_job_act", args=[head.id, "cancel_flows"])
    page = client.post(url, follow=True).content.decode()
    assert "1 of 1 selected jobs cancelled, with 2 jobs waiting on them." in page
    states = dict(Job.objects.filter(id__in=[head.id, middle.id, tail.id, plain.id])
                  .values_list("id", "state"))  # fmt: skip
    assert states == {head.id: "cancelled", middle.id: "cancelled", tail.id: "cancelled",
                      plain.id: "available"}  # fmt: skip


def test_cancelling_flows_and_batches_needs_the_cancel_permission(operator: Any) -> None:
    client = operator()  # may view, not cancel
    head, _ = awa_django.chain(AccNoop(1), AccNoop(2))
    batch = awa_django.batch([AccNoop(3)])
    assert "awa-act-cancel_flows" not in detail(client, head.id)
    page = client.get(reverse("admin:awa_django_batch_change", args=[batch])).content.decode()
    assert "awa-act-cancel_batches" not in page
    for model, pk, action in (("job", head.id, "cancel_flows"), ("batch", batch, "cancel_batches")):
        url = reverse(f"admin:awa_django_{model}_act", args=[pk, action])
        assert client.post(url).status_code == 403
    assert not Job.objects.filter(state="cancelled").exists()


def test_cancel_a_batch_from_its_page(operator: Any) -> None:
    client = operator("cancel_job")
    batch = awa_django.batch([AccNoop(i) for i in range(3)], on_complete=AccNoop(-1))
    members = Client().batch_members(batch)
    complete(members[0])
    url = reverse("admin:awa_django_batch_act", args=[batch, "cancel_batches"])
    page = client.post(url, follow=True).content.decode()
    assert "1 batch cancelled: 3 jobs." in page  # two members and the callback
    progress = Client().batch_progress(batch)
    assert (progress.completed, progress.cancelled, progress.is_finished) == (1, 2, True)
    assert Job.objects.get(id=int(progress.on_complete_id or 0)).state == "cancelled"
    page = client.get(reverse("admin:awa_django_batch_change", args=[batch])).content.decode()
    assert "awa-act-cancel_batches" not in page  # finished: nothing left to cancel
