"""The Client's flow verbs for operators (docs/workflows.md, "Admin"): the jobs connected to
a job through its dependencies and the batch it belongs to (reads; the ORM side of storage
is imported on first use, as in observability.py), and cancelling several flows at once."""

from __future__ import annotations

from awa_django.client.twins import async_twin
from awa_django.exceptions import InvalidFlowQuery, JobNotFound
from awa_django.snapshot import FlowNode, JobFlow, JobSnapshot
from awa_django.storage.sql import workflows as workflows_sql

# The admin's flow page: at most this many jobs, up to this many edges away.
FLOW_LIMIT = 200
FLOW_DEPTH = 20
MAX_FLOW_LIMIT = 10_000
MAX_BIGINT = 2**63 - 1


class FlowVerbs:
    @property
    def using(self) -> str:  # the Client's database alias
        raise NotImplementedError

    def cancel_many(self, job_ids: list[int]) -> list[JobSnapshot]:  # the Client's
        raise NotImplementedError

    def cancel_flows(self, job_ids: list[int]) -> list[JobSnapshot]:
        """`cancel(job_id, cascade=True)` for each of `job_ids` in one statement: the jobs
        and every job still waiting on one of them (directly or through other waiting
        jobs); the rows cancelled. Fires Cancelled for each."""
        for job_id in job_ids:
            _check(job_id=job_id)
        waiting = workflows_sql.job_waiting_descendants(ids=list(job_ids)).run(self.using)
        return self.cancel_many(sorted({*job_ids, *waiting}))

    def cancel_batches(self, batch_ids: list[int]) -> list[JobSnapshot]:
        """`cancel_batch` for each of `batch_ids` in one statement: their callbacks and
        every member not yet ended; the rows cancelled. BatchNotFound for an unknown id
        (nothing is cancelled then)."""
        from awa_django.client import workflows

        targets = [i for b in batch_ids for i in workflows.batch_cancel_targets(self.using, b)]
        return self.cancel_many(sorted(set(targets)))

    def job_flow(self, job_id: int, *, limit: int = FLOW_LIMIT, depth: int = FLOW_DEPTH) -> JobFlow:
        """The jobs connected to job `job_id` through dependency edges (its parents, their
        parents, its children... at most `depth` edges away), at most `limit` of them, with
        their live states; `JobFlow.truncated` says more are connected. JobNotFound when
        there is no such job, in the table or among the dead letters."""
        from awa_django.storage import flows

        _check(job_id=job_id, limit=limit, depth=depth)
        flow = flows.job_flow(job_id, using=self.using, limit=limit, depth=depth)
        if flow is None:
            raise JobNotFound(f"no job {job_id}")
        return flow

    def job_batch(self, job_id: int) -> int | None:
        """The id of the batch job `job_id` is a member of (or a callback of); None."""
        from awa_django.storage import flows

        _check(job_id=job_id)
        return flows.job_batch(job_id, using=self.using)

    def job_nodes(self, job_ids: list[int]) -> list[FlowNode]:
        """Jobs `job_ids` (at most MAX_FLOW_LIMIT) as flow nodes with their live states, in
        the order given; a job among the dead letters is DEAD_LETTERED, one gone is GONE."""
        from awa_django.storage import flows

        if len(job_ids) > MAX_FLOW_LIMIT:
            raise InvalidFlowQuery(f"at most {MAX_FLOW_LIMIT} jobs at once, got {len(job_ids)}")
        for job_id in job_ids:
            _check(job_id=job_id)
        return flows.job_nodes(job_ids, using=self.using)

    acancel_flows = async_twin(cancel_flows)
    acancel_batches = async_twin(cancel_batches)
    ajob_flow = async_twin(job_flow)
    ajob_nodes = async_twin(job_nodes)
    ajob_batch = async_twin(job_batch)


def _check(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidFlowQuery(f"{name} must be an int, got {value!r}")
        if not 1 <= value <= (MAX_FLOW_LIMIT if name != "job_id" else MAX_BIGINT):
            raise InvalidFlowQuery(f"{name} {value} is out of range")
