"""Maps what a handler did to the transition it asks for (DESIGN §5). Pure: no I/O.

`plan()` returns None for a plain completion (the completer batches those) and a
`Transition` for everything else; the executor writes it with `job_set_state_if_running`.
"""

from __future__ import annotations

import datetime as dt
import math
import traceback
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from awa_django.events import Cancelled, Event, Exhausted, Retried, WaitingForCallback
from awa_django.exceptions import InvalidJobArgs, TerminalError, UnknownJobKind
from awa_django.results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa_django.snapshot import JobSnapshot
from awa_django.states import JobState

TRACEBACK_LINES = 10
# An error entry is stored on the hot row once per attempt: a handler whose exception text
# is megabytes long must not bloat it.
MAX_ERROR_CHARS = 8000
# Ten years: far beyond any real delay, far inside PostgreSQL's interval range.
MAX_DELAY_SECONDS = 10 * 365 * 86400.0


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

    def params(self, row: JobSnapshot, progress: str | None) -> dict[str, Any]:
        """Parameters of `job_set_state_if_running` for this transition of `row`."""
        values = asdict(self)
        del values["event"], values["reason"]
        if values["error"] is not None:
            # PostgreSQL text cannot hold NUL; an exception message may.
            values["error"] = values["error"].replace("\x00", "\\x00")
        return {**values, "id": row.id, "run_lease": row.run_lease, "progress": progress}


def plan(row: JobSnapshot, result: Any = None) -> Transition | None:
    """The transition for a handler that returned `result` (None: a plain completion).

    Never raises: a malformed outcome (RetryAfter("soon"), Snooze(inf), WaitForCallback of
    something that is not a token) fails the attempt like an exception would, instead of
    leaving the job running until rescue runs it again, forever."""
    try:
        return _plan(row, result)
    except (TypeError, ValueError) as exc:
        return plan_failure(row, exc)


def _plan(row: JobSnapshot, result: Any) -> Transition | None:
    match result:
        case RetryAfter(seconds=seconds):
            seconds = _delay(RetryAfter, seconds)
            if row.attempt >= row.max_attempts:
                shown = int(seconds) if seconds.is_integer() else seconds
                message = f"max_attempts exhausted (handler requested retry after {shown}s)"
                return Transition(JobState.FAILED, Exhausted, error=message)
            return Transition(
                JobState.RETRYABLE, Retried, run_at_mode="delay", delay_seconds=seconds
            )
        case Snooze(seconds=seconds):
            return Transition(
                JobState.SCHEDULED,
                None,
                run_at_mode="delay",
                delay_seconds=_delay(Snooze, seconds),
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
                callback_id=_callback_id(token),
            )
    return None


def _delay(kind: type, seconds: object) -> float:
    """Seconds (a number or a timedelta) as a float in 0..MAX_DELAY_SECONDS."""
    if isinstance(seconds, dt.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{kind.__name__} takes a number of seconds, got {seconds!r:.100}")
    if not math.isfinite(seconds):
        raise ValueError(f"{kind.__name__} takes a finite number of seconds, got {seconds!r}")
    return min(max(float(seconds), 0.0), MAX_DELAY_SECONDS)


def _callback_id(token: object) -> uuid.UUID:
    if isinstance(token, CallbackToken):
        return token.id
    if isinstance(token, uuid.UUID):
        return token  # the token's id: the park guard still checks it was registered
    raise TypeError(
        f"WaitForCallback takes the token register_callback() returned, got {token!r:.100}"
    )


def plan_failure(row: JobSnapshot, error: BaseException) -> Transition:
    """The transition for a handler that raised `error` (or whose job cannot run)."""
    message = describe(error)
    # SystemExit / KeyboardInterrupt from a handler would end the worker; retrying them
    # would end the next worker too, so they fail the job at once.
    if isinstance(
        error, TerminalError | UnknownJobKind | InvalidJobArgs | SystemExit | KeyboardInterrupt
    ):
        return Transition(JobState.FAILED, Exhausted, error=message, terminal=True)
    if row.attempt >= row.max_attempts:
        return Transition(JobState.FAILED, Exhausted, error=message)
    return Transition(JobState.RETRYABLE, Retried, run_at_mode="backoff", error=message)


def after_refused_park(job: JobSnapshot, current: JobSnapshot | None) -> Transition | None:
    """A park (WaitForCallback) matched no row. If the attempt still runs under its lease,
    the handler returned a token that is not the job's current callback: fail the job.
    Otherwise the callback was resolved before the park landed: the outcome is stale."""
    if current and current.state == JobState.RUNNING and current.run_lease == job.run_lease:
        return contract_violation()
    return None


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
    try:
        message = str(error)
        lines = "".join(traceback.format_exception(error)).rstrip().splitlines()
    except Exception:  # an exception whose __str__ fails must still fail its job cleanly
        message, lines = "<exception text unavailable>", []
    if isinstance(error, UnknownJobKind | InvalidJobArgs):
        return message[:MAX_ERROR_CHARS]  # our own message says everything; no traceback
    if len(lines) > TRACEBACK_LINES:
        dropped = len(lines) - TRACEBACK_LINES
        lines = [f"... ({dropped} lines truncated, full trace in logs)", *lines[-TRACEBACK_LINES:]]
    text = f"{name}: {message}" + "\n" + "\n".join(lines)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 40] + "\n... (truncated, full text in logs)"
    return text


def event_for(transition: Transition, row: JobSnapshot) -> Event:
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
