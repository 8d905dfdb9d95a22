"""The Client's bulk verbs (docs/bulk-operations.md, decision 018), a base class of
`Client` so that client.py stays one screenful per concern; the work is in bulk.py.

Each verb runs in chunks of `chunk_size` jobs, one transaction each, and records the
operation, so `resume_bulk(id)` finishes one that stopped; `on_progress` is called with a
`BulkProgress` after every chunk. Between chunks it pauses to leave the database to the
workers: chunks take at most `busy_fraction` of the wall time (default 0.25), and
`max_per_second` caps the jobs looked at per second. Inside the caller's transaction the
chunks are savepoints of it (one transaction after all): call these outside `atomic()` for
large sets.
"""

from __future__ import annotations

from typing import TypedDict, Unpack

from awa_django.bulk import BulkAction, BulkProgress, JobFilter
from awa_django.client import bulk
from awa_django.client.bulk import DEFAULT_CHUNK, ProgressCallback
from awa_django.client.twins import async_twin
from awa_django.states import JobState


class RunOptions(TypedDict, total=False):
    chunk_size: int  # jobs per transaction, 1..10,000 (default 2,000)
    on_progress: ProgressCallback | None  # called after each committed chunk
    created_by: str  # who asked, recorded on the operation
    max_per_second: float | None  # pace: at most this many jobs looked at per second
    busy_fraction: float  # share of wall time spent in chunks, 0 < f <= 1 (default 0.25)


class BulkVerbs:
    @property
    def using(self) -> str:
        raise NotImplementedError

    def bulk_cancel(self, where: JobFilter, **run: Unpack[RunOptions]) -> BulkProgress:
        """Cancel every non-terminal job matching `where`, running ones as `cancel` does
        (the attempt's outcome turns stale). Fires Cancelled per job after each chunk."""
        return self._bulk(BulkAction.CANCEL, where, run)

    def bulk_retry(self, where: JobFilter, **run: Unpack[RunOptions]) -> BulkProgress:
        """`retry` every failed, cancelled, retryable or waiting_external job matching `where`; one
        whose unique key another live job holds is left and counted in `conflicts`."""
        return self._bulk(BulkAction.RETRY, where, run)

    def bulk_set_priority(
        self, where: JobFilter, priority: int, **run: Unpack[RunOptions]
    ) -> BulkProgress:
        """Give every waiting (neither running nor terminal) job matching `where`
        `priority`; it replaces an aged priority."""
        return self._bulk(BulkAction.SET_PRIORITY, where, run, priority=priority)

    def bulk_move_queue(
        self, where: JobFilter, queue: str, **run: Unpack[RunOptions]
    ) -> BulkProgress:
        """Move every waiting (neither running nor terminal) job matching `where` to
        `queue` (InvalidQueueName if it is not a valid name)."""
        return self._bulk(BulkAction.MOVE_QUEUE, where, run, target_queue=queue)

    def drain_queue(self, queue: str, **run: Unpack[RunOptions]) -> BulkProgress:
        """Cancel every job of `queue` that is neither running nor terminal (T20)."""
        states = tuple(s for s in BulkAction.CANCEL.states if s != JobState.RUNNING)
        return self.bulk_cancel(JobFilter(queue=queue, states=states), **run)

    def retry_failed(
        self, *, kind: str | None = None, queue: str | None = None, **run: Unpack[RunOptions]
    ) -> BulkProgress:
        """`bulk_retry` of the failed jobs of `kind` and/or `queue` (None: any)."""
        return self.bulk_retry(JobFilter(queue=queue, kind=kind, states=("failed",)), **run)

    def discard_failed(
        self, *, kind: str | None = None, queue: str | None = None, **run: Unpack[RunOptions]
    ) -> BulkProgress:
        """Delete the failed jobs of `kind` and/or `queue` (None: any). Fires nothing."""
        where = JobFilter(queue=queue, kind=kind, states=("failed",))
        return self._bulk(BulkAction.DISCARD, where, run)

    def bulk_count(self, action: BulkAction | str, where: JobFilter) -> int:
        """How many jobs `action` would look at under `where` now."""
        return bulk.count(self.using, BulkAction(action), where)

    def bulk_dry_run(
        self,
        action: BulkAction | str,
        where: JobFilter,
        *,
        priority: int | None = None,
        target_queue: str | None = None,
        **run: Unpack[RunOptions],
    ) -> int:
        """What the operation would look at, after every check the operation itself makes
        (priority, target queue, chunk size, pace): a dry run refuses exactly what the real
        run would refuse, and changes nothing.

            Client().bulk_dry_run("set_priority", JobFilter(queue="email"), priority=1)
        """
        action = BulkAction(action)
        self._check(action, run, priority, target_queue)
        return self.bulk_count(action, where)

    def resume_bulk(
        self,
        operation_id: int,
        *,
        on_progress: ProgressCallback | None = None,
        max_per_second: float | None = None,
        busy_fraction: float = bulk.DEFAULT_BUSY_FRACTION,
    ) -> BulkProgress:
        """Carry on a stopped operation after its last committed chunk (a finished one is
        returned as it is); BulkOperationNotFound if there is none."""
        return bulk.run(self.using, operation_id, on_progress, max_per_second, busy_fraction)

    def bulk_operation(self, operation_id: int) -> BulkProgress:
        """One operation as recorded; BulkOperationNotFound if there is none."""
        return bulk.get(self.using, operation_id)

    def bulk_operations(self, limit: int = 50) -> list[BulkProgress]:
        """The most recent operations, newest first (finished ones are kept until pruned)."""
        return bulk.recent(self.using, limit)

    def _bulk(
        self,
        action: BulkAction,
        where: JobFilter,
        run: RunOptions,
        *,
        priority: int | None = None,
        target_queue: str | None = None,
    ) -> BulkProgress:
        self._check(action, run, priority, target_queue)
        busy_fraction = run.get("busy_fraction", bulk.DEFAULT_BUSY_FRACTION)
        operation_id = bulk.start(
            self.using,
            action,
            where,
            chunk_size=run.get("chunk_size", DEFAULT_CHUNK),
            created_by=run.get("created_by", ""),
            priority=priority,
            target_queue=target_queue,
        )
        return bulk.run(
            self.using,
            operation_id,
            run.get("on_progress"),
            run.get("max_per_second"),
            busy_fraction,
        )

    @staticmethod
    def _check(action: BulkAction, run: RunOptions, priority: object, target_queue: object) -> None:
        bulk.check_arguments(
            action,
            chunk_size=run.get("chunk_size", DEFAULT_CHUNK),
            max_per_second=run.get("max_per_second"),
            busy_fraction=run.get("busy_fraction", bulk.DEFAULT_BUSY_FRACTION),
            priority=priority,
            target_queue=target_queue,
        )

    abulk_cancel = async_twin(bulk_cancel)
    abulk_retry = async_twin(bulk_retry)
    abulk_set_priority = async_twin(bulk_set_priority)
    abulk_move_queue = async_twin(bulk_move_queue)
    adrain_queue = async_twin(drain_queue)
    aretry_failed = async_twin(retry_failed)
    adiscard_failed = async_twin(discard_failed)
    abulk_count = async_twin(bulk_count)
    abulk_dry_run = async_twin(bulk_dry_run)
    aresume_bulk = async_twin(resume_bulk)
    abulk_operation = async_twin(bulk_operation)
    abulk_operations = async_twin(bulk_operations)
