"""Bulk operations on the Client's side (decision 018): an operation row records the
filter, the action and a keyset cursor; each chunk is one transaction that locks that row,
runs one guarded chunk statement (storage/sql/bulk.py) from the cursor and advances it. A
stopped operation therefore resumes exactly after its last committed chunk, and two
processes resuming the same one take turns instead of doing a chunk twice.

The ORM side of storage is imported on first use, as in queues.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeGuard

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from awa_django.bulk import BulkAction, BulkProgress, JobFilter, check_priority
from awa_django.client.delivery import dispatch_on_commit
from awa_django.codec import storable_text
from awa_django.conf import validate_queue_name
from awa_django.events import Cancelled
from awa_django.exceptions import BulkOperationNotFound, InvalidJobFilter
from awa_django.storage.sql import bulk as bulk_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.storage.sql.bulk import ChunkOutcome, Window

if TYPE_CHECKING:
    from awa_django.storage.models import BulkOperation

DEFAULT_CHUNK = 2000
MAX_CHUNK = 10_000
MAX_CREATED_BY_CHARS = 200
# The share of wall time an operation keeps its database busy unless told otherwise: after
# a chunk that took t seconds it pauses 3t. An operator's clean-up should leave most of the
# database to the workers (decision 024: unpaced, a 1,000,000-job retry held a 2-core
# machine's drain to 66-82 % of its rate; docs/performance.md).
DEFAULT_BUSY_FRACTION = 0.25
ProgressCallback = Callable[[BulkProgress], None]


def count(using: str, action: BulkAction, where: JobFilter) -> int:
    """How many jobs `action` would look at under `where` now (a dry run)."""
    return bulk_sql.job_bulk_count(where=where, states=where.states_for(action)).run(using)


def start(
    using: str,
    action: BulkAction,
    where: JobFilter,
    *,
    chunk_size: int,
    created_by: str = "",
    priority: int | None = None,
    target_queue: str | None = None,
) -> int:
    """Record a new operation (checked first) and return its id; `run` carries it out."""
    from awa_django.storage.models import BulkOperation

    check_chunk_size(chunk_size)
    operation = BulkOperation.objects.using(using).create(
        action=action.value,
        filter=where.to_json(),
        priority=priority,
        target_queue=target_queue,
        state="running",
        chunk_size=chunk_size,
        total_estimate=count(using, action, where),
        created_by=storable_text(str(created_by))[:MAX_CREATED_BY_CHARS],
    )
    return operation.id


def check_arguments(
    action: BulkAction,
    *,
    chunk_size: object,
    max_per_second: object,
    busy_fraction: object,
    priority: object = None,
    target_queue: object = None,
) -> None:
    """Every argument of an operation besides its filter (which checked itself when it was
    built), as the operation checks them. A dry run calls this too, so it refuses exactly
    what the real run would."""
    check_chunk_size(chunk_size)
    check_rate(max_per_second)
    check_busy_fraction(busy_fraction)
    if action is BulkAction.SET_PRIORITY:
        check_priority(priority)
    if action is BulkAction.MOVE_QUEUE:
        validate_queue_name(target_queue)


def check_chunk_size(chunk_size: object) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise InvalidJobFilter(f"chunk_size must be a whole number, got {chunk_size!r:.30}")
    if not 1 <= chunk_size <= MAX_CHUNK:
        raise InvalidJobFilter(f"chunk_size must be between 1 and {MAX_CHUNK}")
    return chunk_size


def check_rate(max_per_second: object) -> float | None:
    if max_per_second is None:
        return None
    if not (_number(max_per_second) and math.isfinite(max_per_second) and max_per_second > 0):
        raise InvalidJobFilter(f"max_per_second must be > 0, got {max_per_second!r:.30}")
    return float(max_per_second)


def check_busy_fraction(busy_fraction: object) -> float:
    if not (_number(busy_fraction) and 0 < busy_fraction <= 1):
        raise InvalidJobFilter(f"busy_fraction must be > 0 and <= 1, got {busy_fraction!r:.30}")
    return float(busy_fraction)


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def run(
    using: str,
    operation_id: int,
    on_progress: ProgressCallback | None,
    max_per_second: float | None = None,
    busy_fraction: float = DEFAULT_BUSY_FRACTION,
) -> BulkProgress:
    """Chunks until the operation is complete; `on_progress` hears after each commit.
    Between chunks it pauses so that chunks take at most `busy_fraction` of the wall time
    and, with `max_per_second`, no more jobs than that are looked at per second: the
    database's CPU and I/O are shared with the workers (decision 018)."""
    pace = check_rate(max_per_second)
    share = check_busy_fraction(busy_fraction)
    looked_at = get(using, operation_id).matched if pace else 0
    while True:
        began = time.monotonic()
        progress = run_chunk(using, operation_id)
        took = time.monotonic() - began
        if on_progress is not None:
            on_progress(progress)
        if progress.finished:
            return progress
        pause = took * (1 - share) / share
        if pace is not None:
            pause = max(pause, (progress.matched - looked_at) / pace - took)
        if pause > 0:
            time.sleep(pause)
        looked_at = progress.matched


def run_chunk(using: str, operation_id: int) -> BulkProgress:
    """One chunk in one transaction (a savepoint inside the caller's, if any)."""
    from awa_django.storage.models import BulkOperation

    check_operation_id(operation_id)
    with transaction.atomic(using=using):
        operation = (
            BulkOperation.objects.using(using).select_for_update().filter(pk=operation_id).first()
        )
        if operation is None:
            raise BulkOperationNotFound(f"no bulk operation with id {operation_id}")
        if operation.state == "running":
            _advance(operation, _chunk(using, operation))
            operation.save()
            operation.refresh_from_db(fields=["updated_at", "finished_at"])
    return snapshot(operation)


def _advance(operation: BulkOperation, outcome: ChunkOutcome) -> None:
    operation.cursor = outcome.last_id or operation.cursor
    operation.matched += outcome.matched
    operation.done += outcome.done
    operation.conflicts += outcome.conflicts
    operation.skipped += outcome.matched - outcome.done
    operation.updated_at = Now()
    if outcome.matched < operation.chunk_size:
        operation.state = "completed"
        operation.finished_at = Now()


def _chunk(using: str, operation: BulkOperation) -> ChunkOutcome:
    action = BulkAction(operation.action)
    where = JobFilter.from_json(operation.filter)
    window = Window(where, where.states_for(action), operation.cursor, operation.chunk_size)
    if action is BulkAction.CANCEL:
        return _cancel(using, bulk_sql.job_bulk_cancel(window=window).run(using))
    if action is BulkAction.RETRY:
        return _retry(using, window)
    if action is BulkAction.SET_PRIORITY:
        assert operation.priority is not None
        query = bulk_sql.job_bulk_set_priority(window=window, priority=operation.priority)
    elif action is BulkAction.MOVE_QUEUE:
        assert operation.target_queue is not None
        query = bulk_sql.job_bulk_move_queue(window=window, target_queue=operation.target_queue)
    else:
        query = bulk_sql.job_bulk_discard(window=window)
    return query.run(using)


def _cancel(using: str, outcome: ChunkOutcome) -> ChunkOutcome:
    """As Client.cancel_many: leases of cancelled attempts go in the same transaction, and
    Cancelled fires for every cancelled job once the chunk commits."""
    if outcome.cancelled:
        ids = [job.id for job in outcome.cancelled]
        leases_sql.lease_delete_for_jobs(ids=ids).run(using)
        events = [Cancelled(job=job, reason="cancelled by operator") for job in outcome.cancelled]
        dispatch_on_commit(events, using)
    return outcome


def _retry(using: str, window: Window) -> ChunkOutcome:
    """A unique key taken by a concurrent enqueue between the chunk's check and its update
    fails the statement: run it again leaving every keyed row (counted as conflicts)."""
    try:
        with transaction.atomic(using=using):
            return bulk_sql.job_bulk_retry(window=window, skip_keyed=False).run(using)
    except IntegrityError:
        return bulk_sql.job_bulk_retry(window=window, skip_keyed=True).run(using)


def get(using: str, operation_id: int) -> BulkProgress:
    from awa_django.storage.models import BulkOperation

    check_operation_id(operation_id)
    operation = BulkOperation.objects.using(using).filter(pk=operation_id).first()
    if operation is None:
        raise BulkOperationNotFound(f"no bulk operation with id {operation_id}")
    return snapshot(operation)


def recent(using: str, limit: int) -> list[BulkProgress]:
    from awa_django.storage.models import BulkOperation

    return [snapshot(op) for op in BulkOperation.objects.using(using).order_by("-id")[:limit]]


def check_operation_id(operation_id: object) -> None:
    """Ids are whole numbers: anything else names no operation (and the ORM would raise a
    ValueError of its own). One out of bigint range the ORM already finds nothing for."""
    if isinstance(operation_id, bool) or not isinstance(operation_id, int):
        raise BulkOperationNotFound(f"no bulk operation with id {operation_id!r:.30}")


def snapshot(operation: BulkOperation) -> BulkProgress:
    return BulkProgress(
        id=operation.id,
        action=BulkAction(operation.action),
        filter=JobFilter.from_json(operation.filter),
        state=operation.state,
        matched=operation.matched,
        done=operation.done,
        skipped=operation.skipped,
        conflicts=operation.conflicts,
        total_estimate=operation.total_estimate,
        cursor=operation.cursor,
        priority=operation.priority,
        target_queue=operation.target_queue,
        created_by=operation.created_by,
        created_at=operation.created_at,
        finished_at=operation.finished_at,
    )
