"""Workflows on the Client's side (decision 043, docs/workflows-api.md): enqueue after
parents, chains and groups over it, batches, and a flow's cancel. The fan-in runs in the
database (migration 0013's triggers); this module only writes a child's edges, in the
caller's transaction, after locking its parents."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from django.db import connections, transaction

from awa_django.client import inserts
from awa_django.exceptions import BatchNotFound, InvalidDependency, ParentNotFound
from awa_django.execution.rows import (
    NO_OPTIONS,
    EnqueueKwargs,
    EnqueueOptions,
    JobTemplate,
    plan_one,
    plan_rows,
)
from awa_django.options import MAX_PARENTS, check_parent_failure, check_parents
from awa_django.snapshot import BatchProgress, JobSnapshot
from awa_django.states import TERMINAL_STATES, JobState, ParentFailurePolicy
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import workflows as workflows_sql

Parents = Sequence[int | JobSnapshot]


@dataclass(frozen=True, slots=True)
class Step:
    """One job of a chain, group or batch: its args and enqueue options (`step(...)`)."""

    args: Any
    options: EnqueueOptions = NO_OPTIONS


def step(args: Any, **options: Unpack[EnqueueKwargs]) -> Step:
    """A job with its options, for `chain`, `group` and `batch`; a bare args instance is
    the same as `step(args)`.

        chain(step(Fetch(url), queue="io"), Parse(), Store())
    """
    return Step(args, EnqueueOptions(**options) if options else NO_OPTIONS)


def as_step(job: Any) -> Step:
    return job if isinstance(job, Step) else Step(job)


def enqueue_after(
    using: str, args: Any, options: EnqueueOptions, after: object, on_parent_failure: object
) -> JobSnapshot:
    """Insert one job that waits on the parents `after` (ids or JobSnapshots) in state
    `waiting_parents`, in the caller's transaction. Parents that already ended count at
    once (completed: done; failed, cancelled or dead-lettered: the policy applies now), so
    the returned row may already be available, scheduled or cancelled; with `discard` and
    a parent already failed, the row is deleted before this returns (the snapshot is the
    row as inserted). ParentNotFound (nothing written) if a parent does not exist."""
    parents = check_parents(after)
    policy = check_parent_failure(on_parent_failure)
    template, encoded = plan_one(args, options)
    if template.unique is not None:
        raise InvalidDependency("a unique job cannot wait on parents (unique=False opts out)")
    template = dataclasses.replace(template, state=JobState.WAITING_PARENTS)
    if connections[using].in_atomic_block:
        # No savepoint: a missing parent raises before anything is written.
        return _linked(using, template, encoded, parents, policy)
    with transaction.atomic(using=using):  # the lock, the row and its edges commit together
        return _linked(using, template, encoded, parents, policy)


def _linked(
    using: str,
    template: JobTemplate,
    encoded: str,
    parents: tuple[int, ...],
    policy: ParentFailurePolicy,
) -> JobSnapshot:
    ended = workflows_sql.job_lock_parents(ids=parents).run(using)
    missing = tuple(p for p in parents if p not in ended)
    if missing:
        raise ParentNotFound(
            f"no job with id {missing[0]} (parents missing: {len(missing)})", ids=missing
        )
    row = inserts.insert_one(using, template, encoded, None)
    state = workflows_sql.job_link_parents(child=row.id, parents=ended, policy=policy).run(using)
    if state in (JobState.WAITING_PARENTS, None):
        return row  # as inserted (discarded at once: the row is gone)
    return jobs_sql.job_get(id=row.id).run(using) or row


def chain(using: str, jobs: Sequence[Any], on_parent_failure: object) -> list[JobSnapshot]:
    """Each job after the one before it, in one transaction; their rows in order."""
    if not jobs:
        raise InvalidDependency("chain() takes at least one job")
    check_parent_failure(on_parent_failure)  # a chain of one job uses none, checked alike
    with transaction.atomic(using=using):
        first = as_step(jobs[0])
        rows = [inserts.insert_one(using, *plan_one(first.args, first.options), None)]
        for job in jobs[1:]:
            spec = as_step(job)
            rows.append(
                enqueue_after(using, spec.args, spec.options, [rows[-1].id], on_parent_failure)
            )
        return rows


def group(using: str, jobs: Sequence[Any]) -> list[JobSnapshot]:
    """Every job at once, in one transaction; their rows in order."""
    if not jobs:
        raise InvalidDependency("group() takes at least one job")
    with transaction.atomic(using=using):
        return [
            inserts.insert_one(using, *plan_one(s.args, s.options), None)
            for s in map(as_step, jobs)
        ]


def group_then(
    using: str, jobs: Sequence[Any], then: Any, on_parent_failure: object
) -> tuple[list[JobSnapshot], JobSnapshot]:
    """`group`, and `then` as a child of every member, in one transaction."""
    with transaction.atomic(using=using):
        members = group(using, jobs)
        spec = as_step(then)
        child = enqueue_after(using, spec.args, spec.options, members, on_parent_failure)
        return members, child


def batch(using: str, jobs: Iterable[Any], on_success: Any | None, on_complete: Any | None) -> int:
    """Enqueue `jobs` as one batch and its callbacks, each a child of every member:
    `on_success` (policy `cancel`: it runs only if every member completed; a failed
    member that is retried and completes lets it run) and `on_complete` (policy `run`: it
    runs once every member ended, however). Returns the batch id."""
    from awa_django.storage.models import Job
    from awa_django.storage.workflows import Batch, BatchMember

    jobs = _listed(jobs)
    if not jobs:
        raise InvalidDependency("batch() takes at least one job")
    # A callback waits on every member: refused before any member is written.
    if (on_success is not None or on_complete is not None) and len(jobs) > MAX_PARENTS:
        raise InvalidDependency(
            f"a batch with a callback takes at most {MAX_PARENTS:,} jobs, got {len(jobs):,}"
        )
    steps = [as_step(job) for job in jobs]
    with transaction.atomic(using=using):
        ids = [
            i
            for i in inserts.insert_many(
                using, plan_rows([(s.args, s.options) for s in steps]), skip=False
            )
            if i is not None
        ]
        created = Batch.objects.using(using).create(total=len(ids))
        BatchMember.objects.using(using).bulk_create(
            [BatchMember(job_id=i, batch_id=created.id) for i in ids], batch_size=2000
        )
        # The members are this transaction's own rows: nobody else can move them yet.
        Job.objects.using(using).filter(id__in=ids).update(has_dependents=True)
        created.on_success_id = _callback(using, on_success, ids, ParentFailurePolicy.CANCEL)
        created.on_complete_id = _callback(using, on_complete, ids, ParentFailurePolicy.RUN)
        created.save(update_fields=["on_success_id", "on_complete_id"])
        return created.id


def _listed(jobs: object) -> list[Any]:
    """batch()'s jobs as a list: any iterable of them but text or a mapping (each of its
    keys would be taken for a job); one job alone is a typed error, not a TypeError."""
    if isinstance(jobs, str | bytes | Mapping) or not isinstance(jobs, Iterable):
        raise InvalidDependency(f"batch() takes a list of jobs, got {type(jobs).__name__}")
    return list(jobs)


def _callback(
    using: str, job: Any | None, members: list[int], policy: ParentFailurePolicy
) -> int | None:
    if job is None:
        return None
    spec = as_step(job)
    return enqueue_after(using, spec.args, spec.options, members, policy).id


def batch_progress(using: str, batch_id: int) -> BatchProgress:
    from awa_django.storage.workflows import Batch

    try:
        b = Batch.objects.using(using).get(id=batch_id)
    except Batch.DoesNotExist:
        raise BatchNotFound(f"no batch with id {batch_id}") from None
    return BatchProgress(
        batch_id=b.id,
        total=b.total,
        completed=b.completed,
        failed=b.failed,
        cancelled=b.cancelled,
        created_at=b.created_at,
        finished_at=b.finished_at,
        on_success_id=b.on_success_id,
        on_complete_id=b.on_complete_id,
    )


def batch_members(using: str, batch_id: int) -> list[int]:
    from awa_django.storage.workflows import BatchMember

    batch_progress(using, batch_id)  # BatchNotFound
    return list(
        BatchMember.objects.using(using)
        .filter(batch_id=batch_id)
        .order_by("job_id")
        .values_list("job_id", flat=True)
    )


def batch_cancel_targets(using: str, batch_id: int) -> list[int]:
    """The jobs a batch's cancel takes: its callbacks and members not yet ended."""
    from awa_django.storage.models import Job

    progress = batch_progress(using, batch_id)
    callbacks = [i for i in (progress.on_success_id, progress.on_complete_id) if i is not None]
    ids = [*callbacks, *batch_members(using, batch_id)]
    return list(
        Job.objects.using(using)
        .filter(id__in=ids)
        .exclude(state__in=TERMINAL_STATES)
        .values_list("id", flat=True)
    )


def waiting_descendants(using: str, job_id: int) -> list[int]:
    return workflows_sql.job_waiting_descendants(ids=[job_id]).run(using)


def children(using: str, job_id: int) -> list[int]:
    from awa_django.storage.workflows import JobDependency

    return list(
        JobDependency.objects.using(using)
        .filter(parent_id=job_id)
        .order_by("child_id")
        .values_list("child_id", flat=True)
    )
