"""Maps what a handler did to the transition it asks for (DESIGN §5). Pure: no I/O.

`plan()` returns None for a plain completion (the completer batches those) and a
`Transition` for everything else; the executor writes it with `job_set_state_if_running`.
"""

from __future__ import annotations

import traceback
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from ..events import Cancelled, Event, Exhausted, Retried, WaitingForCallback
from ..exceptions import InvalidJobArgs, TerminalError, UnknownJobKind
from ..results import Cancel, RetryAfter, Snooze, WaitForCallback
from ..snapshot import JobRow
from ..states import JobState

TRACEBACK_LINES = 10


@dataclass(frozen=True, slots=True)
class Transition:
    state: str
    event: type[Event] | None
    run_at_mode: str = "keep"  # keep | delay | backoff
    delay_seconds: float | None = None
    attempt_refund: int = 0
    finalize: bool = True
    error: str | None = None
    terminal: bool = False
    callback_id: uuid.UUID | None = None
    reason: str = ""

    def params(self, row: JobRow, progress: str | None) -> dict[str, Any]:
        """Parameters of `job_set_state_if_running` for this transition of `row`."""
        values = asdict(self)
        del values["event"], values["reason"]
        return {**values, "id": row.id, "run_lease": row.run_lease, "progress": progress}


def plan(row: JobRow, result: Any = None) -> Transition | None:
    """The transition for a handler that returned `result` (None: a plain completion)."""
    match result:
        case RetryAfter(seconds=seconds):
            if row.attempt >= row.max_attempts:
                message = f"max_attempts exhausted (handler requested retry after {seconds}s)"
                return Transition(JobState.FAILED, Exhausted, error=message)
            return Transition(
                JobState.RETRYABLE, Retried, run_at_mode="delay", delay_seconds=seconds
            )
        case Snooze(seconds=seconds):
            return Transition(
                JobState.SCHEDULED,
                None,
                run_at_mode="delay",
                delay_seconds=seconds,
                attempt_refund=1,
                finalize=False,
            )
        case Cancel(reason=reason):
            return Transition(
                JobState.CANCELLED, Cancelled, error=f"cancelled: {reason}", reason=reason
            )
        case WaitForCallback(token=token):
            return Transition(
                JobState.WAITING_EXTERNAL,
                WaitingForCallback,
                finalize=False,
                callback_id=token.id,
            )
    return None


def plan_failure(row: JobRow, error: BaseException) -> Transition:
    """The transition for a handler that raised `error` (or whose job cannot run)."""
    message = describe(error)
    if isinstance(error, TerminalError | UnknownJobKind | InvalidJobArgs):
        return Transition(JobState.FAILED, Exhausted, error=message, terminal=True)
    if row.attempt >= row.max_attempts:
        return Transition(JobState.FAILED, Exhausted, error=message)
    return Transition(JobState.RETRYABLE, Retried, run_at_mode="backoff", error=message)


def contract_violation() -> Transition:
    return Transition(
        JobState.FAILED,
        Exhausted,
        error="WaitForCallback returned without calling register_callback",
        terminal=True,
    )


def describe(error: BaseException) -> str:
    """`module.Type: message` plus the last lines of the traceback."""
    kind = type(error)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else (f"{kind.__module__}.{kind.__qualname__}")
    )
    if isinstance(error, UnknownJobKind | InvalidJobArgs):
        return str(error)  # our own message already says everything; no traceback noise
    head = f"{name}: {error}"
    lines = "".join(traceback.format_exception(error)).rstrip().splitlines()
    if len(lines) > TRACEBACK_LINES:
        dropped = len(lines) - TRACEBACK_LINES
        lines = [f"... ({dropped} lines truncated, full trace in logs)", *lines[-TRACEBACK_LINES:]]
    return head + "\n" + "\n".join(lines)


def event_for(transition: Transition, row: JobRow) -> Event:
    """The event a committed `transition` of `row` announces (its type must be set)."""
    event_type = transition.event
    assert event_type is not None
    fields: dict[str, Any] = {"job": row}
    names = event_type.__dataclass_fields__
    if "error" in names:
        fields["error"] = transition.error or ""
    if "attempt" in names:
        fields["attempt"] = row.attempt
    if "next_run_at" in names:
        fields["next_run_at"] = row.run_at
    if "reason" in names:
        fields["reason"] = transition.reason
    return event_type(**fields)
