"""`JobContext[T]`: what a handler receives — its typed args plus the attempt's controls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from awa_django.codec import dumps
from awa_django.results import CallbackToken
from awa_django.snapshot import JobSnapshot, ParentResult

if TYPE_CHECKING:
    from datetime import datetime

T = TypeVar("T")


class AttemptHost(Protocol):
    """What the runtime provides to a running attempt (the executor implements it)."""

    def register_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken: ...
    def wait_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any: ...
    async def aregister_callback(self, job: JobContext[Any], timeout: float) -> CallbackToken: ...
    async def await_for_callback(self, job: JobContext[Any], token: CallbackToken) -> Any: ...
    def flush_progress(self, job: JobContext[Any]) -> None: ...
    async def aflush_progress(self, job: JobContext[Any]) -> None: ...


class JobContext(Generic[T]):
    """One attempt of one job, as its handler sees it.

    `args` is the decoded args dataclass; `row` the committed snapshot taken at claim.
    Progress is buffered and written with the next heartbeat and atomically with the
    outcome; it survives retries and is cleared on success.
    """

    def __init__(self, row: JobSnapshot, args: T, host: AttemptHost | None = None) -> None:
        self.row = row
        self.args = args
        self._host = host
        # A plain flag: set from the heartbeat or listener thread, read by the handler.
        self._cancelled = False
        self._progress: dict[str, Any] | None = dict(row.progress) if row.progress else None
        self._progress_dirty = False
        self.result: Any = None  # return value stored on completion (django.tasks backend)

    # -- identity -----------------------------------------------------------------------
    @property
    def id(self) -> int:
        return self.row.id

    @property
    def kind(self) -> str:
        return self.row.kind

    @property
    def queue(self) -> str:
        return self.row.queue

    @property
    def attempt(self) -> int:
        return self.row.attempt

    @property
    def max_attempts(self) -> int:
        return self.row.max_attempts

    @property
    def run_lease(self) -> int:
        return self.row.run_lease

    @property
    def metadata(self) -> dict[str, Any]:
        return self.row.metadata

    @property
    def created_at(self) -> datetime:
        return self.row.created_at

    # -- progress -----------------------------------------------------------------------
    @property
    def progress(self) -> dict[str, Any] | None:
        return self._progress

    def set_progress(self, percent: float, message: str | None = None) -> None:
        """Record progress (0-100, clamped) and an optional message."""
        progress = dict(self._progress or {})
        progress["percent"] = max(0.0, min(100.0, float(percent)))
        if message is not None:
            progress["message"] = message
        self._set_progress(progress)

    def update_metadata(self, values: dict[str, Any]) -> None:
        """Shallow-merge `values` into `progress["metadata"]` (kept across retries)."""
        if not isinstance(values, dict):
            raise TypeError("update_metadata() takes a dict")
        progress = dict(self._progress or {})
        progress["metadata"] = {**progress.get("metadata", {}), **values}
        self._set_progress(progress)

    def _set_progress(self, progress: dict[str, Any]) -> None:
        # Checked now, in the handler, so a value that cannot be stored fails this call
        # with a clear SerializationError instead of the outcome write later.
        dumps(progress, what=f"progress of job {self.id}")
        self._progress = progress
        self._progress_dirty = True

    def progress_json(self) -> str | None:
        """The current progress as JSON, written atomically with the attempt's outcome."""
        return None if self._progress is None else dumps(self._progress, what="progress")

    def take_progress(self) -> dict[str, Any] | None:
        """The buffered progress if it changed since the last flush (runtime use)."""
        if not self._progress_dirty:
            return None
        self._progress_dirty = False
        return self._progress

    def flush_progress(self) -> None:
        """Write buffered progress now instead of at the next heartbeat."""
        self._require_host().flush_progress(self)

    async def aflush_progress(self) -> None:
        """`flush_progress()` for async handlers."""
        await self._require_host().aflush_progress(self)

    # -- cancellation -------------------------------------------------------------------
    def is_cancelled(self) -> bool:
        """True once this attempt was cancelled, rescued, or the worker is shutting down."""
        return self._cancelled

    def mark_cancelled(self) -> None:
        self._cancelled = True

    # -- workflows ----------------------------------------------------------------------
    def parent_results(self) -> list[ParentResult]:
        """The parents this job was enqueued `after=` (ascending ids): how each ended and,
        for a completed one, the result its handler stored (`job.result = value`). A child
        with `on_parent_failure="run"` sees here which parents failed. Reads the committed
        rows through Django's connection of `AWA["DATABASE"]`; [] without parents."""
        from awa_django.conf import awa_settings
        from awa_django.storage.sql.workflows import job_parents

        return job_parents(id=self.id).run(awa_settings().database)

    async def aparent_results(self) -> list[ParentResult]:
        """`parent_results()` for async handlers."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.parent_results)()

    # -- callbacks ----------------------------------------------------------------------
    def register_callback(self, timeout: float = 3600) -> CallbackToken:
        """Register an external callback; hand `token.id` to the outside system."""
        return self._require_host().register_callback(self, timeout)

    def wait_for_callback(self, token: CallbackToken) -> Any:
        """Wait in place (keeping the worker slot) until `resume_external`; its payload."""
        return self._require_host().wait_for_callback(self, token)

    async def aregister_callback(self, timeout: float = 3600) -> CallbackToken:
        return await self._require_host().aregister_callback(self, timeout)

    async def await_for_callback(self, token: CallbackToken) -> Any:
        return await self._require_host().await_for_callback(self, token)

    def _require_host(self) -> AttemptHost:
        if self._host is None:
            raise RuntimeError("this JobContext is not attached to a running attempt")
        return self._host

    def __repr__(self) -> str:
        return f"<JobContext {self.kind} #{self.id} attempt {self.attempt}/{self.max_attempts}>"
