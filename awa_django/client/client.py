"""The Client: the one way to change a job or a queue (enqueue, cancel, retry, pause, resume,
callback resolution) and to read the operators' figures, on Django's connection.

Everything here joins the caller's transaction: a job enqueued inside
`transaction.atomic()` exists iff that transaction commits, and its wake-up NOTIFY is
delivered only then. Events for transitions made here are dispatched on commit. Surfaces
(admin, views, commands, the django.tasks backend) call this class and nothing below it.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, Unpack, cast, overload

from asgiref.sync import sync_to_async
from django.db import transaction

from awa_django.client import callbacks, inserts, queues, schedules, unique, workflows
from awa_django.client.bulk_verbs import BulkVerbs
from awa_django.client.callbacks import DefaultAction, ResolveResult
from awa_django.client.dead_letter_verbs import DeadLetterVerbs
from awa_django.client.delivery import dispatch_on_commit
from awa_django.client.flow_verbs import FlowVerbs
from awa_django.client.history_verbs import HistoryVerbs
from awa_django.client.key_verbs import KeyVerbs
from awa_django.client.twins import async_twin
from awa_django.client.workflow_verbs import WorkflowVerbs
from awa_django.client.workflows import Parents
from awa_django.codec import dumps
from awa_django.conf import awa_settings
from awa_django.events import Cancelled
from awa_django.exceptions import InvalidEnqueueOption, JobNotFound
from awa_django.execution import follow_ups
from awa_django.execution.rows import (
    NO_OPTIONS,
    EnqueueKwargs,
    EnqueueOptions,
    plan_many,
    plan_one,
)
from awa_django.limits import RateLimit
from awa_django.options import MAX_JOB_ID, check_parent_failure
from awa_django.snapshot import JobSnapshot, LiveWorker, QueueStats, ScheduleSnapshot
from awa_django.storage.sql import admin as admin_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.unique import EnqueueManyResult, OnConflict

if TYPE_CHECKING:
    from awa_django.storage.models import QueueState


class Client(BulkVerbs, DeadLetterVerbs, HistoryVerbs, KeyVerbs, WorkflowVerbs, FlowVerbs):
    """Operations on jobs and queues through Django's database connection `using`
    (default: `AWA["DATABASE"]`). Every verb but the backend's `enqueue_task` has an
    `a`-prefixed async twin. The bulk operations come from `BulkVerbs` (bulk_verbs.py), the
    dead-letter verbs from `DeadLetterVerbs` (dead_letter_verbs.py), the queue history from
    `HistoryVerbs` (history_verbs.py), the per-key limits from `KeyVerbs` (key_verbs.py),
    the workflow verbs (chain, group, batch) from `WorkflowVerbs` (workflow_verbs.py)."""

    def __init__(self, using: str | None = None) -> None:
        self._using = using

    @property
    def using(self) -> str:
        return self._using or awa_settings().database

    # -- enqueue ------------------------------------------------------------------------
    def enqueue(
        self,
        args: Any,
        *,
        after: Parents | None = None,
        on_parent_failure: str = "cancel",
        **options: Unpack[EnqueueKwargs],
    ) -> JobSnapshot:
        """Insert one job in the caller's transaction and return its row.

        `args` is an args dataclass instance (its kind comes from the class), or a dict with
        an explicit `kind`. Options left None come from the kind's `@job` declaration, else
        from the defaults in `awa_django.conf`. Every input is checked before any SQL, so a
        bad one raises and leaves the caller's transaction usable: SerializationError /
        PayloadTooLarge (args, metadata), UnknownJobKind (a dict without `kind`),
        InvalidQueueName, InvalidEnqueueOption (kind, priority, max_attempts, tags, run_at).

        `after=[parents]` (job ids or JobSnapshots, enqueued in this transaction or
        earlier) makes the job wait in state `waiting_parents` until every parent ended;
        `on_parent_failure` ('cancel', 'run' or 'discard') says what a parent that fails,
        is cancelled or is dead-lettered does to it (docs/workflows-api.md). Errors:
        InvalidDependency, ParentNotFound (nothing written).
        """
        opts = EnqueueOptions(**options) if options else NO_OPTIONS
        if after is None:
            if on_parent_failure != "cancel":  # unused, but a typo must not pass silently
                check_parent_failure(on_parent_failure)
            return self._enqueue(args, opts)
        return workflows.enqueue_after(self.using, args, opts, after, on_parent_failure)

    def _enqueue(self, args: Any, options: EnqueueOptions) -> JobSnapshot:
        template, encoded = plan_one(args, options)
        return inserts.insert_one(self.using, template, encoded, None)

    @overload
    def enqueue_many(
        self,
        jobs: Iterable[Any],
        *,
        on_conflict: Literal["raise"] = "raise",
        **options: Unpack[EnqueueKwargs],
    ) -> list[int]: ...
    @overload
    def enqueue_many(
        self,
        jobs: Iterable[Any],
        *,
        on_conflict: Literal["skip"],
        **options: Unpack[EnqueueKwargs],
    ) -> EnqueueManyResult: ...
    def enqueue_many(
        self,
        jobs: Iterable[Any],
        *,
        on_conflict: OnConflict = "raise",
        **options: Unpack[EnqueueKwargs],
    ) -> list[int] | EnqueueManyResult:
        """Insert many jobs sharing the given options in the caller's transaction (in one
        of their own in autocommit); return their ids in input order. Fewer than 64 jobs
        take one INSERT, more are written with COPY after one statement that draws their
        ids and queues the NOTIFY (decision 026); unique jobs always take the INSERT.

        `kind` applies to every job of the call, exactly as in `enqueue`: it is required
        when the jobs are dicts. Every job is checked before the statement runs, so one bad
        job raises (as `enqueue` would) and nothing is written.

        Unique jobs (`unique=`, or the kind's `@job(unique=...)`): by default a held key
        raises UniqueConflict and no job of the call is written; `on_conflict="skip"`
        writes the others and returns an EnqueueManyResult naming the skipped positions.
        """
        return self._enqueue_many(jobs, EnqueueOptions(**options), on_conflict)

    def _enqueue_many(
        self, jobs: Iterable[Any], options: EnqueueOptions, on_conflict: OnConflict = "raise"
    ) -> list[int] | EnqueueManyResult:
        if on_conflict not in ("raise", "skip"):
            raise InvalidEnqueueOption(
                f"on_conflict must be 'raise' or 'skip', got {on_conflict!r:.60}"
            )
        ids = inserts.insert_many(self.using, plan_many(jobs, options), skip=on_conflict == "skip")
        if on_conflict == "skip":
            return EnqueueManyResult(tuple(ids))
        return cast(list[int], ids)

    def enqueue_task(
        self,
        payload: dict[str, Any],
        *,
        kind: str,
        django_task: dict[str, Any],
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        max_attempts: int | None = None,
    ) -> JobSnapshot:
        """The django.tasks backend's enqueue (`AwaBackend`), not for application code:
        `enqueue` of the task's `payload`, with its `django_task` marker stored in the job's
        internal column of that name, apart from the user-visible metadata."""
        options = EnqueueOptions(kind, queue, priority, run_at, max_attempts)
        template, encoded = plan_one(payload, options)
        marker = dumps(django_task, what="django_task marker")
        return inserts.insert_one(self.using, template, encoded, marker)

    async def aenqueue(
        self,
        args: Any,
        *,
        after: Parents | None = None,
        on_parent_failure: str = "cancel",
        **options: Unpack[EnqueueKwargs],
    ) -> JobSnapshot:
        """`enqueue` for async code."""
        enqueue = functools.partial(self.enqueue, after=after, on_parent_failure=on_parent_failure)
        return await sync_to_async(enqueue)(args, **options)

    @overload
    async def aenqueue_many(
        self,
        jobs: Iterable[Any],
        *,
        on_conflict: Literal["raise"] = "raise",
        **options: Unpack[EnqueueKwargs],
    ) -> list[int]: ...
    @overload
    async def aenqueue_many(
        self,
        jobs: Iterable[Any],
        *,
        on_conflict: Literal["skip"],
        **options: Unpack[EnqueueKwargs],
    ) -> EnqueueManyResult: ...
    async def aenqueue_many(
        self,
        jobs: Iterable[Any],
        *,
        on_conflict: OnConflict = "raise",
        **options: Unpack[EnqueueKwargs],
    ) -> list[int] | EnqueueManyResult:
        """`enqueue_many` for async code."""
        return await sync_to_async(self._enqueue_many)(jobs, EnqueueOptions(**options), on_conflict)

    # -- jobs ---------------------------------------------------------------------------
    def get_job(self, job_id: int) -> JobSnapshot:
        """The committed row of job `job_id`; JobNotFound if there is none."""
        row = jobs_sql.job_get(id=job_id).run(self.using)
        if row is None:
            raise JobNotFound(f"no job with id {job_id}")
        return row

    def cancel(self, job_id: int, *, cascade: bool = False) -> JobSnapshot | None:
        """Cancel a non-terminal job; None if it was already terminal. A running attempt's
        later outcome becomes stale and its `is_cancelled()` turns true. Fires Cancelled.

        Its waiting children then follow their `on_parent_failure` policy; `cascade=True`
        cancels every job still waiting on it (directly or through other waiting jobs) in
        the same statement, whatever their policy (a later retry of the job does not
        restore those: they were cancelled by the operator, not by the policy)."""
        ids = [job_id]
        if cascade and _job_ids(ids):
            ids += workflows.waiting_descendants(self.using, job_id)
        rows = [r for r in self.cancel_many(ids) if r.id == job_id]
        return rows[0] if rows else None

    def cancel_many(self, job_ids: Iterable[int]) -> list[JobSnapshot]:
        """`cancel` for many jobs in one statement; returns the rows it cancelled. Their
        `on_cancelled_enqueue` follow-ups are inserted in the same transaction."""
        ids = _job_ids(job_ids)
        with transaction.atomic(using=self.using):
            rows = admin_sql.job_cancel_many(ids=ids).run(self.using)
            if rows:
                leases_sql.lease_delete_for_jobs(ids=[r.id for r in rows]).run(self.using)
            events = [Cancelled(job=r, reason="cancelled by operator") for r in rows]
            follow_ups.enqueue_for(events, self.using)
            dispatch_on_commit(events, self.using)
        return rows

    def cancel_by_unique_key(
        self,
        kind: type | str,
        *,
        args: Any = None,
        queue: str | None = None,
        period_bucket: int | None = None,
    ) -> JobSnapshot | None:
        """Cancel the oldest live (non-terminal) job with the unique key that enqueue gave
        a job of `kind` (args dataclass or kind string) with these parts, through `cancel`
        (Cancelled fires; a running attempt hears it). Pass exactly the parts its
        UniqueOpts covered: `args` for by_args, `queue` for by_queue, and for by_period
        the bucket, `UniqueOpts(by_period=...).period_bucket(run_at)`. None if no live job
        has the key.

            client.cancel_by_unique_key(SendReceipt, args=SendReceipt(order_id=7))
        """
        key = unique.key_of(kind, args=args, queue=queue, period_bucket=period_bucket)
        return unique.cancel_oldest_live(self.using, key, self.cancel)

    def retry(self, job_id: int) -> JobSnapshot | None:
        """Make a failed, cancelled, parked or retryable job available now (attempts
        reset); None if the job is in another state. A workflow child some of whose
        parents have not ended waits for them again (`waiting_parents`)."""
        rows = self.retry_many([job_id])
        return rows[0] if rows else None

    def retry_many(self, job_ids: Iterable[int]) -> list[JobSnapshot]:
        """`retry` for many jobs in one statement; returns the rows it retried."""
        return admin_sql.job_retry_many(ids=_job_ids(job_ids)).run(self.using)

    aget_job = async_twin(get_job)
    acancel = async_twin(cancel)
    acancel_many = async_twin(cancel_many)
    acancel_by_unique_key = async_twin(cancel_by_unique_key)
    aretry = async_twin(retry)
    aretry_many = async_twin(retry_many)

    # -- queues (queues.py) ------------------------------------------------------------
    def pause_queue(self, queue: str, *, by: str = "") -> QueueState:
        """Stop dispatch of `queue` on every worker (running attempts finish); idempotent.
        `by` records who paused it (shown on the dashboard and by `awa_status`)."""
        return queues.pause(self.using, queue, by)

    def resume_queue(self, queue: str) -> QueueState:
        """Let workers claim from `queue` again; idempotent."""
        return queues.resume(self.using, queue)

    def set_queue_limits(
        self,
        queue: str,
        *,
        concurrency: int | None = None,
        rate_limit: RateLimit | tuple[float, int] | float | None = None,
        by: str = "",
    ) -> QueueState:
        """Override `queue`'s concurrency and rate limit `(jobs per second, burst)` on every
        worker within a few seconds, until cleared; both are replaced (None: not
        overridden). InvalidQueueLimits on a bad value. docs/flow-control.md."""
        return queues.set_limits(self.using, queue, concurrency, rate_limit, by)

    def clear_queue_limits(self, queue: str) -> QueueState:
        """Drop `queue`'s runtime overrides: its settings apply again on every worker."""
        return queues.clear_limits(self.using, queue)

    def queue_stats(self, window_minutes: int = 5) -> list[QueueStats]:
        """Per-queue depth by state, throughput over `window_minutes`, lag and paused flag,
        sorted by queue name (the dashboard's and `awa_status`'s figures)."""
        return queues.stats(self.using, window_minutes)

    def live_workers(self, within_seconds: float | None = None) -> list[LiveWorker]:
        """Worker processes seen within `within_seconds` (default: the heartbeat
        staleness), leader first."""
        return queues.live_workers(self.using, within_seconds)

    def unhandled_kinds(self) -> dict[str, int]:
        """Kinds with waiting jobs that no live worker has a handler for, with their job
        counts (a rolling deploy in progress, or a missing worker; decision 011)."""
        return queues.unhandled_kinds(self.using)

    def known_queues(self) -> set[str]:
        """Queue names known without scanning the jobs: configured in `AWA["QUEUES"]`,
        declared by a `@job`, or paused or resumed once (at most 200 of those)."""
        return queues.known_queues(self.using)

    apause_queue = async_twin(pause_queue)
    aresume_queue = async_twin(resume_queue)
    aset_queue_limits = async_twin(set_queue_limits)
    aclear_queue_limits = async_twin(clear_queue_limits)
    aqueue_stats = async_twin(queue_stats)
    alive_workers = async_twin(live_workers)
    aunhandled_kinds = async_twin(unhandled_kinds)
    aknown_queues = async_twin(known_queues)

    # -- cron schedules (docs/cron.md; schedules.py) -----------------------------------
    def schedules(self) -> list[ScheduleSnapshot]:
        """Every synced cron schedule, by name, with its next fire time."""
        return schedules.schedules(self.using)

    def schedule(self, name: str) -> ScheduleSnapshot:
        """One schedule; ScheduleNotFound if no leader has synced it (or it was removed)."""
        return schedules.schedule(self.using, name)

    def pause_schedule(self, name: str, *, by: str = "") -> ScheduleSnapshot:
        """Stop firing `name` (a redeploy does not resume it); idempotent. On resume, its
        missed-fire policy decides what the paused time enqueues."""
        return schedules.pause(self.using, name, by)

    def resume_schedule(self, name: str) -> ScheduleSnapshot:
        """Fire `name` again; idempotent."""
        return schedules.resume(self.using, name)

    def trigger_schedule(self, name: str) -> JobSnapshot:
        """Enqueue one job of `name` now, paused or not (metadata `cron_fire_time` = now,
        `triggered_manually`); its scheduled fires go on unchanged."""
        return schedules.trigger(self.using, name)

    def remove_schedule(self, name: str) -> None:
        """Delete schedule `name` (the sync never deletes). Remove its `periodic(...)`
        declaration first: a process that still declares it re-creates it."""
        schedules.remove(self.using, name)

    aschedules = async_twin(schedules)
    aschedule = async_twin(schedule)
    apause_schedule = async_twin(pause_schedule)
    aresume_schedule = async_twin(resume_schedule)
    atrigger_schedule = async_twin(trigger_schedule)
    aremove_schedule = async_twin(remove_schedule)

    # -- callbacks (DESIGN §6; callbacks.py) --------------------------------------------
    def complete_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobSnapshot:
        """Complete a waiting_external (or still running) job. Fires Completed(duration 0).
        The payload is not stored; use `resume_external` to hand one to a waiting handler."""
        return callbacks.complete_external(self.using, callback_id, run_lease)

    def fail_external(
        self, callback_id: uuid.UUID | str, error: str, *, run_lease: int | None = None
    ) -> JobSnapshot:
        """Fail a waiting_external (or still running) job for good. Fires Exhausted."""
        return callbacks.fail_external(self.using, callback_id, error, run_lease)

    def retry_external(self, callback_id: uuid.UUID | str) -> JobSnapshot:
        """Make a waiting_external job available again with its attempts reset. Fires
        Retried (attempt = the parked attempt, next_run_at = the new run_at)."""
        return callbacks.retry_external(self.using, callback_id)

    def resume_external(
        self, callback_id: uuid.UUID | str, payload: Any = None, *, run_lease: int | None = None
    ) -> JobSnapshot:
        """Hand `payload` to the handler waiting in `wait_for_callback`; the job is running
        again. Fires nothing: the resumed attempt reports its own outcome."""
        return callbacks.resume_external(self.using, callback_id, payload, run_lease)

    def heartbeat_callback(
        self, callback_id: uuid.UUID | str, timeout: float = 3600
    ) -> JobSnapshot:
        """Push a waiting_external job's callback timeout to now + `timeout` seconds
        (database clock). Fires nothing."""
        return callbacks.heartbeat_callback(self.using, callback_id, timeout)

    def resolve_callback(
        self,
        callback_id: uuid.UUID | str,
        payload: Any = None,
        default_action: DefaultAction = "ignore",
        *,
        run_lease: int | None = None,
    ) -> ResolveResult:
        """Apply `default_action` to a pending callback, with the row locked FOR UPDATE.

        Awa decides with CEL expressions stored at registration; awa-django has no CEL, so
        the default action always applies: "complete" (fires Completed), "fail" (error
        "callback failed: default action", fires Exhausted) or "ignore" (no change, no
        event; the callback stays pending).
        """
        return callbacks.resolve_callback(
            self.using, callback_id, payload, default_action, run_lease
        )

    acomplete_external = async_twin(complete_external)
    afail_external = async_twin(fail_external)
    aretry_external = async_twin(retry_external)
    aresume_external = async_twin(resume_external)
    aheartbeat_callback = async_twin(heartbeat_callback)
    aresolve_callback = async_twin(resolve_callback)


def _job_ids(job_ids: Iterable[int]) -> list[int]:
    """Distinct and sorted (one lock order for every writer). An int beyond a bigint names
    no job: it is left out here, where the driver would refuse it (a DataError)."""
    return sorted({i for i in job_ids if not isinstance(i, int) or -MAX_JOB_ID <= i <= MAX_JOB_ID})
