"""Maps what a handler did to the transition it asks for (DESIGN §5). Pure: no I/O.

`plan()` returns None for a plain completion (the completer batches those) and a
`Transition` for everything else: one of the catalogue's moves (storage/sql/transitions.py,
`ATTEMPT_MOVES`) with the values its statement takes; `attempt.finish` writes it with
`job_set_state_if_running`. Only here is a move chosen; whether an attempt is exhausted or
its job dead-lettered is the catalogue's rule (`exhausted`, `dead_lettered`).
"""

from __future__ import annotations

import datetime as dt
import math
import traceback
import uuid
from dataclasses import dataclass, replace
from typing import Any

from awa_django.codec import CUT, MAX_ERROR_BYTES, TRUNCATED, storable_text
from awa_django.events import Event
from awa_django.exceptions import InvalidJobArgs, TerminalError, UnknownJobKind
from awa_django.results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa_django.snapshot import JobSnapshot
from awa_django.states import DeadLetterReason, JobState
from awa_django.storage.sql.transitions import (
    CANCEL,
    FAIL,
    HAND_BACK,
    PARK,
    RETRY_AFTER,
    RETRY_LATER,
    SNOOZE,
    Move,
    exhausted,
)

# Lines of traceback stored with an error (marker lines not counted): the last frames.
TRACEBACK_LINES = 16
# Ten years: far beyond any real delay, far inside PostgreSQL's interval range.
MAX_DELAY_SECONDS = 10 * 365 * 86400.0


@dataclass(frozen=True, slots=True)
class Transition:
    """A chosen `move` and what its statement writes with it: the handler's delay
    (RETRY_AFTER, SNOOZE, HAND_BACK), the attempt's error entry, a park's token."""

    move: Move
    delay_seconds: float | None = None
    error: str | None = None
    error_type: str | None = None  # the exception's class path, its own key in the entry
    terminal: bool = False
    callback_id: uuid.UUID | None = None
    reason: str = ""
    # Set (the DeadLetterReason) when the job moves to the dead letters instead of staying
    # `failed`: only `routed()` sets it, for a queue with `"dead_letter": True`.
    dead_letter: str | None = None
    # The exception class `error_type` names, for the writer to recognise by identity.
    error_class: type[BaseException] | None = None

    @property
    def state(self) -> JobState:
        return self.move.state

    @property
    def event(self) -> type[Event] | None:
        """What the committed move announces (the move's event)."""
        return self.move.event


def routed(transition: Transition, dead_letter_queue: bool) -> Transition:
    """`transition`, or on a dead-letter queue, a failure for good turned into a move to
    the dead letters with its reason (decision 016). Other transitions stay as they are."""
    if not dead_letter_queue or transition.move is not FAIL:
        return transition
    reason = (
        DeadLetterReason.TERMINAL_ERROR
        if transition.terminal
        else DeadLetterReason.MAX_ATTEMPTS_EXHAUSTED
    )
    return replace(transition, dead_letter=reason.value)


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
            if exhausted(row.attempt, row.max_attempts):
                shown = int(seconds) if seconds.is_integer() else seconds
                message = f"max_attempts exhausted (handler requested retry after {shown}s)"
                return Transition(FAIL, error=message)
            return Transition(RETRY_AFTER, delay_seconds=seconds)
        case Snooze(seconds=seconds):
            return Transition(SNOOZE, delay_seconds=_delay(Snooze, seconds))
        case Cancel(reason=reason):
            text = storable_text(f"cancelled: {reason}")
            return Transition(CANCEL, error=text, reason=text[11:])
        case WaitForCallback(token=token):
            return Transition(PARK, callback_id=_callback_id(token))
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


def plan_failure(row: JobSnapshot, error: BaseException, *, logged: bool = False) -> Transition:
    """The transition for a handler that raised `error` (or whose job cannot run).
    `logged`: the caller logs the whole trace of a failure for good (attempt.failure), so
    its stored error may point there when cut."""
    kind = exception_path(error)
    # SystemExit / KeyboardInterrupt from a handler would end the worker; retrying them
    # would end the next worker too, so they fail the job at once.
    terminal = isinstance(
        error, TerminalError | UnknownJobKind | InvalidJobArgs | SystemExit | KeyboardInterrupt
    )
    error_class = type(error)
    if terminal or exhausted(row.attempt, row.max_attempts):
        message = describe(error, logged=logged)
        return Transition(
            FAIL, error=message, error_type=kind, terminal=terminal, error_class=error_class
        )
    return Transition(
        RETRY_LATER,
        error=describe(error),
        error_type=kind,
        error_class=error_class,
    )


def after_refused_park(job: JobSnapshot, current: JobSnapshot | None) -> Transition | None:
    """A park (WaitForCallback) matched no row. If the attempt still runs under its lease,
    the handler returned a token that is not the job's current callback: fail the job.
    Otherwise the callback was resolved before the park landed: the outcome is stale."""
    if current and current.state == JobState.RUNNING and current.run_lease == job.run_lease:
        return contract_violation(current.callback_id)
    return None


def contract_violation(current_callback: uuid.UUID | None) -> Transition:
    """The job fails for good: waiting on a callback nobody can resolve would hang it."""
    if current_callback is None:
        error = "WaitForCallback returned without calling register_callback"
    else:
        error = (
            "WaitForCallback returned a superseded callback token: register_callback was "
            f"called again, and only the latest token ({current_callback}) can resolve the job"
        )
    return Transition(FAIL, error=error, terminal=True)


# How long a job whose kind this worker cannot run waits before any worker may claim it
# again (a rolling deploy: a worker with the handler is usually seconds away).
HANDBACK_SECONDS = 5.0
_UNKNOWN_KIND = f"{UnknownJobKind.__module__}.{UnknownJobKind.__qualname__}"


def plan_unknown_kind(row: JobSnapshot, error: UnknownJobKind, grace: float) -> Transition:
    """A worker without the handler hands the job back, its attempt not counted, so a
    rolling deploy never fails new work; once the kind has gone unhandled for `grace`
    seconds since the first hand-back, the job fails (decision 011). A worker claims a
    kind it lacks only once the job has been due for `grace` (decision 032): it fails at
    that claim."""
    since = handed_back_since(row)
    now = row.attempted_at or row.run_at
    unhandled_for = max(
        0.0 if since is None else (now - since).total_seconds(), (now - row.run_at).total_seconds()
    )
    if grace <= 0 or unhandled_for >= grace:
        waited = "" if grace <= 0 else f" (not run within UNKNOWN_KIND_GRACE, {grace:.0f}s)"
        return Transition(
            FAIL,
            error=storable_text(f"{error}{waited}"),
            error_type=_UNKNOWN_KIND,
            terminal=True,
        )
    first = since is None  # only the first hand-back leaves an entry: when it started
    return Transition(
        HAND_BACK,
        # Due again when the grace ends at the latest, so a short grace is kept.
        delay_seconds=min(HANDBACK_SECONDS, grace - unhandled_for),
        error=f"no handler for kind {row.kind!r} in this worker: handed back" if first else None,
        error_type=_UNKNOWN_KIND if first else None,
    )


def handed_back_since(row: JobSnapshot) -> dt.datetime | None:
    """When a worker first handed the job back for want of its handler, if the latest
    error entry says so."""
    last = row.errors[-1] if row.errors else {}
    if last.get("type") != _UNKNOWN_KIND or last.get("terminal"):
        return None
    try:
        return dt.datetime.fromisoformat(str(last["at"]))
    except (KeyError, ValueError):
        return None


def unstorable(error: BaseException) -> Transition:
    """The job fails for good when the database cannot store a value of its outcome (or
    the codec refused it): the same values would be refused on every retry. Progress is
    not written (it may be the culprit)."""
    return Transition(
        FAIL,
        error=storable_text(f"the outcome of this attempt could not be stored: {error}"),
        error_type=exception_path(error),
        terminal=True,
        error_class=type(error),
    )


def plan_refused(row: JobSnapshot, error: BaseException) -> Transition:
    """The attempt whose outcome the database refused for a reason of its own (a trigger,
    a constraint, a conflict, a timeout; not its values) ends like one that raised: retried
    with backoff, exhausted on the last attempt (decision 036). The refused outcome itself
    committed nothing, so no event of it is announced."""
    message = storable_text(f"the database refused the outcome of this attempt: {error}")
    kind = exception_path(error)
    error_class = type(error)
    if exhausted(row.attempt, row.max_attempts):
        return Transition(FAIL, error=message, error_type=kind, error_class=error_class)
    return Transition(
        RETRY_LATER,
        error=message,
        error_type=kind,
        error_class=error_class,
    )


def exception_path(error: BaseException) -> str:
    """The class path stored as an error entry's `type`: `builtins.ValueError`,
    `shop.jobs.PaymentDeclined`."""
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"


def describe(error: BaseException, *, logged: bool = False) -> str:
    """`module.Type: message`, then the traceback as Python prints it (its last lines when
    long), ending like `traceback.format_exception` with the exception line and its
    newline; storable and bounded (codec.storable_text). `logged`: the whole trace is in
    the worker's log, so a cut says so; otherwise it promises nothing."""
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else exception_path(error)
    try:
        message = str(error)
        lines = "".join(traceback.format_exception(error)).splitlines(keepends=True)
    except Exception:  # an exception whose __str__ fails must still fail its job cleanly
        message, lines = "<exception text unavailable>", []
    if isinstance(error, UnknownJobKind | InvalidJobArgs):
        return storable_text(message)  # our own message says everything; no traceback
    lines = _trimmed(lines, ", full trace in logs" if logged else "")
    return _bounded(f"{name}: {message}\n", "".join(lines), CUT if not logged else TRUNCATED)


def _bounded(head: str, trace: str, marker: str) -> str:
    """`head` + `trace` within MAX_ERROR_BYTES. A long message is cut in the head, so the
    trace's last line (the one a reader and Django's TaskError look at) stays whole; only a
    trace that cannot fit on its own is cut at its end."""
    whole = storable_text(head + trace, marker=marker)
    if not whole.endswith(marker):
        return whole
    trace = storable_text(trace)
    room = MAX_ERROR_BYTES - len(trace.encode())
    if room < MAX_ERROR_BYTES // 4:  # the trace alone is most of the limit: cut its end
        return whole
    return storable_text(head.rstrip("\n"), room - 1, marker) + "\n" + trace


def _trimmed(lines: list[str], where: str) -> list[str]:
    """The traceback's last TRACEBACK_LINES lines (each with its newline), without the
    `~~~^^^` marker lines of Python 3.11+ (they point into a source line and are noise once
    stored), cut at a frame boundary so the kept part starts with a `File` line, never
    with a stray source line. `where` completes the mark that stands for the cut lines."""
    lines = [line for line in lines if not _is_marker(line)]
    if len(lines) <= TRACEBACK_LINES + 1:  # a mark in place of one line would save nothing
        return lines
    start = len(lines) - TRACEBACK_LINES
    while start < len(lines) - 1 and not lines[start].lstrip().startswith("File "):
        start += 1
    return [f"... ({start} lines truncated{where})\n", *lines[start:]]


def _is_marker(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.strip("^~")


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
    if "dead_lettered" in names:
        fields["dead_lettered"] = transition.dead_letter is not None
    return event_type(**fields)
