"""Workflows in the admin (docs/workflows.md, "Admin"): a job's parents, children and batch on
its detail page, and the flow page of the jobs connected to it (a chain, a group and its
child, a batch and its callbacks), bounded in size with a notice when there are more.

Everything is read through `Client.job_flow()` / `Client.batch_progress()`; the detail
page asks only for a job that has parents or children (two booleans on its row), so a job
outside any workflow costs nothing more."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from awa_django.admin.routing import primary, read_alias
from awa_django.client import Client
from awa_django.client.flow_verbs import FLOW_LIMIT
from awa_django.exceptions import BatchNotFound, JobNotFound
from awa_django.snapshot import DEAD_LETTERED, GONE, BatchProgress, FlowNode, JobFlow

# The detail page lists at most this many parents and children; the flow page shows more.
DETAIL_LIMIT = 20
# "Cancel with waiting children" takes at most this many selected jobs (their waiting
# descendants are found in one statement and cancelled in one more).
MAX_FLOWS = 1_000
FLOW_FIELDS = ("flow_parents", "flow_children", "flow_batch")

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    _Base = ModelAdmin[Any]
else:
    _Base = object


def in_a_flow(job: Any) -> bool:
    return bool(job.has_parents or job.has_dependents)


class FlowDetailMixin(_Base):
    """For the job admin: the Workflow panel of a job in a flow, and its flow page."""

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = list(super().get_fieldsets(request, obj))
        if obj is not None and in_a_flow(obj):
            fieldsets.insert(1, ("Workflow", {"fields": FLOW_FIELDS}))
        return fieldsets

    def _flow(self, obj: Any) -> JobFlow | None:
        # Read once per page (three fields show it), from the database the job came from.
        if "_awa_flow" not in obj.__dict__:
            client = Client(obj._state.db)
            try:
                # Room for DETAIL_LIMIT of each side, beside the job itself.
                limit = 2 * DETAIL_LIMIT + 1
                obj.__dict__["_awa_flow"] = client.job_flow(obj.pk, limit=limit, depth=1)
            except JobNotFound:  # deleted since the page's own read
                obj.__dict__["_awa_flow"] = None
        flow: JobFlow | None = obj.__dict__["_awa_flow"]
        return flow

    @admin.display(description="parents")
    def flow_parents(self, obj: Any) -> SafeString:
        flow = self._flow(obj)
        if flow is None or not flow.parent_count:
            return _muted("no parents")
        shown = flow.parents[:DETAIL_LIMIT]
        return format_html(
            "{}{}{}",
            _waiting(flow),
            node_list(self.admin_site.name, shown),
            _more(flow.parent_count - len(shown), "parents", self._flow_url(obj)),
        )

    @admin.display(description="children")
    def flow_children(self, obj: Any) -> SafeString:
        flow = self._flow(obj)
        if flow is None:
            return _muted("no children")
        shown = flow.children[:DETAIL_LIMIT]
        return format_html(
            '{}{}<p><a href="{}" id="awa-flow-link">Show the whole flow</a></p>',
            node_list(self.admin_site.name, shown) if shown else _muted("no children"),
            _more(flow.child_count - len(shown), "children", self._flow_url(obj)),
            self._flow_url(obj),
        )

    @admin.display(description="batch")
    def flow_batch(self, obj: Any) -> SafeString:
        flow = self._flow(obj)
        if flow is None or flow.batch_id is None:
            return _muted("in no batch")
        try:
            progress = Client(obj._state.db).batch_progress(flow.batch_id)
        except BatchNotFound:  # pruned since
            return _muted(f"batch {flow.batch_id} (gone)")
        return batch_summary(self.admin_site.name, progress)

    def _flow_url(self, obj: Any) -> str:
        return reverse(f"{self.admin_site.name}:awa_django_job_flow", args=[obj.pk])

    def flow_view(self, request: HttpRequest, object_id: int) -> TemplateResponse:
        """The jobs connected to one job, generation by generation."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            flow = Client(read_alias(request, self.model)).job_flow(object_id)
        except JobNotFound:
            raise Http404(f"no job {object_id}") from None
        context = {
            **self.admin_site.each_context(request),
            "title": f"Flow of job {object_id}",
            "opts": self.model._meta,
            "flow": flow,
            "rows": [_row(self.admin_site.name, n, flow) for n in flow.nodes],
            "job_url": _job_url(self.admin_site.name, flow.job_id),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/awa_django/job/flow.html", context)


@admin.action(
    permissions=["cancel_job"], description="Cancel selected jobs and the jobs waiting on them"
)
def cancel_flows(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    """`Client.cancel(..., cascade=True)` for the selection: each job and every job still
    waiting on it, whatever their policy (a later retry of the job does not restore them)."""
    ids = list(queryset.order_by().values_list("id", flat=True)[: MAX_FLOWS + 1])
    if len(ids) > MAX_FLOWS:
        messages.error(request, f"Select at most {MAX_FLOWS} jobs for this action.")
        return
    cancelled = Client(primary(queryset.model)).cancel_flows(ids)
    waiting = len([r for r in cancelled if r.id not in ids])
    messages.success(
        request,
        f"{len(cancelled) - waiting} of {len(ids)} selected jobs cancelled, with {waiting} "
        "jobs waiting on them.",
    )


def _row(site: str, node: FlowNode, flow: JobFlow) -> dict[str, Any]:
    return {
        "node": node,
        "link": node_link(site, node),
        "badge": state_badge(node.state),
        "parents": format_html_join(
            ", ", '<a href="{}">{}</a>', ((_job_url(site, p), p) for p in node.parents)
        ),
        "current": node.id == flow.job_id,
    }


def node_list(site: str, nodes: list[FlowNode]) -> SafeString:
    return format_html(
        '<ul class="awa-flow-nodes">{}</ul>',
        format_html_join(
            "",
            "<li>{} {} <code>{}</code></li>",
            ((node_link(site, n), state_badge(n.state), n.kind) for n in nodes),
        ),
    )


def node_link(site: str, node: FlowNode) -> SafeString:
    if node.state == DEAD_LETTERED:
        url = reverse(f"{site}:awa_django_deadletter_change", args=[quote(node.id)])
        return format_html('<a href="{}">#{}</a>', url, node.id)
    if node.state == GONE:
        return format_html("#{}", node.id)
    return format_html('<a href="{}">#{}</a>', _job_url(site, node.id), node.id)


def state_badge(state: str) -> SafeString:
    return format_html('<span class="awa-badge awa-state-{}">{}</span>', state, state)


def batch_summary(site: str, progress: BatchProgress) -> SafeString:
    url = reverse(f"{site}:awa_django_batch_change", args=[progress.batch_id])
    return format_html(
        '<a href="{}">batch {}</a>: {} of {} ended ({} completed, {} failed, {} cancelled){}',
        url,
        progress.batch_id,
        progress.ended,
        progress.total,
        progress.completed,
        progress.failed,
        progress.cancelled,
        " — finished" if progress.is_finished else "",
    )


def _waiting(flow: JobFlow) -> SafeString:
    if flow.waiting is None:
        return SafeString("")
    waiting = flow.waiting
    return format_html(
        '<p class="awa-flow-waiting">{} of {} parents not ended, {} failed; if one fails: '
        "<code>{}</code></p>",
        waiting.pending_parents,
        flow.parent_count,
        waiting.failed_parents,
        waiting.on_parent_failure,
    )


def _more(hidden: int, what: str, url: str) -> SafeString:
    if hidden <= 0:
        return SafeString("")
    return format_html(
        '<p class="awa-truncated">and {} more {}: <a href="{}">the flow page</a> shows up to '
        "{}.</p>",
        hidden,
        what,
        url,
        FLOW_LIMIT,
    )


def _muted(text: str) -> SafeString:
    return format_html('<span class="awa-muted">{}</span>', text)


def _job_url(site: str, job_id: int) -> str:
    return reverse(f"{site}:awa_django_job_change", args=[job_id])
