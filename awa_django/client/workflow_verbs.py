"""The Client's workflow verbs (docs/workflows-api.md, decision 043): chains, groups and
batches, a batch's progress and cancel, a job's parents and children; each a short
delegation to `workflows.py`, with their async twins. `Client` inherits them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, overload

from awa_django.client import workflows
from awa_django.client.twins import async_twin
from awa_django.snapshot import BatchProgress, JobSnapshot, ParentResult
from awa_django.storage.sql import workflows as workflows_sql


@dataclass(frozen=True, slots=True)
class GroupResult:
    """What `group(...).then(child)` enqueued: the members, then the child of them all."""

    members: tuple[JobSnapshot, ...]
    child: JobSnapshot


class WorkflowVerbs:
    @property
    def using(self) -> str:  # the Client's database alias
        raise NotImplementedError

    def cancel_many(self, job_ids: Any) -> list[JobSnapshot]:  # the Client's
        raise NotImplementedError

    def chain(self, *jobs: Any, on_parent_failure: str = "cancel") -> list[JobSnapshot]:
        """Enqueue `jobs` (args instances or `step(...)`s) so that each runs after the one
        before it completed, in one transaction; their rows in order (the first available,
        the others `waiting_parents`). Celery's `chain(a, b, c)`."""
        return workflows.chain(self.using, jobs, on_parent_failure)

    @overload
    def group(
        self, *jobs: Any, then: None = None, on_parent_failure: str = "cancel"
    ) -> list[JobSnapshot]: ...
    @overload
    def group(self, *jobs: Any, then: Any, on_parent_failure: str = "cancel") -> GroupResult: ...
    def group(
        self, *jobs: Any, then: Any | None = None, on_parent_failure: str = "cancel"
    ) -> GroupResult | list[JobSnapshot]:
        """Enqueue `jobs` at once; with `then`, also a child of all of them (fan-out,
        fan-in: Celery's chord), in one transaction. Returns the members' rows, or a
        GroupResult when `then` is given."""
        if then is None:
            return workflows.group(self.using, jobs)
        members, child = workflows.group_then(self.using, jobs, then, on_parent_failure)
        return GroupResult(tuple(members), child)

    def batch(
        self, jobs: Iterable[Any], *, on_success: Any | None = None, on_complete: Any | None = None
    ) -> int:
        """Enqueue `jobs` as one batch whose members' outcomes are counted
        (`batch_progress`). `on_success` runs once every member completed, `on_complete`
        once every member ended however; each is enqueued now as a child of every member
        and made available in the last member's transaction, so it runs exactly once.
        Returns the batch id."""
        return workflows.batch(self.using, jobs, on_success, on_complete)

    def batch_progress(self, batch_id: int) -> BatchProgress:
        """The batch's counts; BatchNotFound if there is none."""
        return workflows.batch_progress(self.using, batch_id)

    def batch_members(self, batch_id: int) -> list[int]:
        """The ids of the batch's members, ascending; BatchNotFound if there is none."""
        return workflows.batch_members(self.using, batch_id)

    def cancel_batch(self, batch_id: int) -> list[JobSnapshot]:
        """Cancel the batch's callbacks and every member not yet ended (Cancelled fires for
        each); the rows cancelled."""
        return self.cancel_many(workflows.batch_cancel_targets(self.using, batch_id))

    def parents(self, job_id: int) -> list[ParentResult]:
        """The parents of job `job_id` (ascending ids) and how each ended; [] for a job
        enqueued without `after=`."""
        return workflows_sql.job_parents(id=job_id).run(self.using)

    def children(self, job_id: int) -> list[int]:
        """The ids of the jobs enqueued with `after=` naming `job_id`, ascending."""
        return workflows.children(self.using, job_id)

    achain = async_twin(chain)
    agroup = async_twin(group)
    abatch = async_twin(batch)
    abatch_progress = async_twin(batch_progress)
    abatch_members = async_twin(batch_members)
    acancel_batch = async_twin(cancel_batch)
    aparents = async_twin(parents)
    achildren = async_twin(children)
