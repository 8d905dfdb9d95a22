"""Unit tests of `awa_django.worker.outcomes`: what each handler result maps to (DESIGN §5),
the error text of an exception, and the event a committed transition announces."""

from __future__ import annotations

import datetime as dt
import traceback
import uuid
from dataclasses import replace
from typing import Any

import pytest

from awa_django.codec import MAX_ERROR_BYTES
from awa_django.events import Cancelled, Exhausted, Retried, WaitingForCallback
from awa_django.exceptions import InvalidJobArgs, TerminalError, UnknownJobKind
from awa_django.execution import outcomes
from awa_django.execution.outcomes import (
    Transition,
    contract_violation,
    describe,
    event_for,
    plan,
    plan_failure,
    plan_unknown_kind,
)
from awa_django.results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa_django.snapshot import JobSnapshot
from awa_django.storage.sql import transitions

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def make_row(**changes: Any) -> JobSnapshot:
    row = JobSnapshot(
        id=11,
        kind="core_unit",
        queue="default",
        args={"n": 1},
        state="running",
        priority=2,
        attempt=1,
        max_attempts=3,
        run_at=NOW,
        created_at=NOW,
        attempted_at=NOW,
        finalized_at=None,
        run_lease=4,
        errors=[],
        metadata={},
        tags=[],
        progress=None,
        callback_id=None,
        callback_timeout_at=None,
        result=None,
        attempted_by=["w"],
    )
    return replace(row, **changes)


class CoreUnitBoom(Exception):
    pass


def raised(error: BaseException) -> BaseException:
    """`error` with a real traceback attached, as a handler would produce it."""
    try:
        raise error
    except BaseException as exc:
        return exc


# -- plan ---------------------------------------------------------------------------------
@pytest.mark.parametrize("result", [None, "ignored", 42, {"a": 1}])
def test_plain_return_values_complete_through_the_completer(result: Any) -> None:
    assert plan(make_row(), result=result) is None


def test_retry_after_is_retryable_with_a_delay_and_no_error() -> None:
    t = plan(make_row(attempt=1, max_attempts=3), result=RetryAfter(7.5))
    assert t == Transition(transitions.RETRY_AFTER, delay_seconds=7.5)
    assert (t.state, t.event, t.error) == ("retryable", Retried, None)


def test_retry_after_on_the_last_attempt_exhausts_with_the_catalogue_message() -> None:
    t = plan(make_row(attempt=3, max_attempts=3), result=RetryAfter(5))
    assert t is not None
    assert (t.state, t.event) == ("failed", Exhausted)
    assert t.error == "max_attempts exhausted (handler requested retry after 5s)"
    assert not t.terminal


def test_snooze_refunds_the_attempt_and_keeps_finalized_at() -> None:
    t = plan(make_row(), result=Snooze(30))
    assert t == Transition(transitions.SNOOZE, delay_seconds=30)
    assert (t.state, t.event) == ("scheduled", None)


def test_snooze_on_the_last_attempt_does_not_exhaust() -> None:
    t = plan(make_row(attempt=3, max_attempts=3), result=Snooze(1))
    assert t is not None and t.state == "scheduled"


def test_cancel_is_cancelled_with_the_reason_in_the_error() -> None:
    t = plan(make_row(), result=Cancel("customer left"))
    assert t is not None
    assert (t.state, t.event, t.reason) == ("cancelled", Cancelled, "customer left")
    assert t.error == "cancelled: customer left"


def test_cancel_default_reason() -> None:
    t = plan(make_row(), result=Cancel())
    assert t is not None and t.error == "cancelled: cancelled by handler"


def test_wait_for_callback_parks_with_the_token_as_guard() -> None:
    token = CallbackToken(id=uuid.uuid4(), timeout_at=NOW)
    t = plan(make_row(), result=WaitForCallback(token))
    assert t is not None
    assert (t.state, t.event, t.callback_id) == ("waiting_external", WaitingForCallback, token.id)
    assert t.move is transitions.PARK and t.error is None


def test_an_exception_is_retryable_with_backoff() -> None:
    t = plan_failure(make_row(attempt=1, max_attempts=3), raised(CoreUnitBoom("boom")))
    assert t is not None
    assert (t.move, t.event, t.terminal) == (transitions.RETRY_LATER, Retried, False)
    assert t.error is not None and t.error.startswith(f"{__name__}.CoreUnitBoom: boom\n")


@pytest.mark.parametrize(("attempt", "state"), [(2, "retryable"), (3, "failed"), (4, "failed")])
def test_exhaustion_is_attempt_at_least_max_attempts(attempt: int, state: str) -> None:
    t = plan_failure(make_row(attempt=attempt, max_attempts=3), raised(ValueError("x")))
    assert t is not None and t.state == state
    assert not t.terminal  # exhaustion is not a terminal error


@pytest.mark.parametrize(
    "error",
    [TerminalError("card declined"), UnknownJobKind("unknown job kind: x"), InvalidJobArgs("bad")],
)
def test_terminal_causes_fail_at_once(error: Exception) -> None:
    t = plan_failure(make_row(attempt=1, max_attempts=25), raised(error))
    assert t is not None
    assert (t.state, t.event, t.terminal) == ("failed", Exhausted, True)


def test_subclass_of_terminal_error_is_terminal() -> None:
    class CoreUnitDeclined(TerminalError):
        pass

    t = plan_failure(make_row(), raised(CoreUnitDeclined("no")))
    assert t is not None and t.terminal


def test_contract_violation_message() -> None:
    t = contract_violation(None)
    assert (t.state, t.event, t.terminal) == ("failed", Exhausted, True)
    assert t.error == "WaitForCallback returned without calling register_callback"


def test_a_superseded_token_is_named_as_such() -> None:
    current = uuid.uuid4()
    t = contract_violation(current)
    assert (t.state, t.terminal) == ("failed", True)
    assert t.error is not None and "superseded callback token" in t.error
    assert str(current) in t.error


# -- malformed outcomes never raise -------------------------------------------------------
@pytest.mark.parametrize("seconds", [dt.timedelta(minutes=2), 120, 120.0])
def test_delays_accept_numbers_and_timedeltas(seconds: Any) -> None:
    for result in (RetryAfter(seconds), Snooze(seconds)):
        t = plan(make_row(), result)
        assert t is not None and t.delay_seconds == 120.0


def test_delays_are_clamped_to_zero_and_ten_years() -> None:
    assert plan(make_row(), RetryAfter(-5)).delay_seconds == 0.0  # type: ignore[union-attr]
    huge = plan(make_row(), Snooze(1e20))
    assert huge is not None and huge.delay_seconds == outcomes.MAX_DELAY_SECONDS


@pytest.mark.parametrize(
    "result",
    [
        RetryAfter(float("inf")),
        RetryAfter(float("nan")),
        RetryAfter("soon"),  # type: ignore[arg-type]
        RetryAfter(None),  # type: ignore[arg-type]
        RetryAfter(True),
        Snooze(float("-inf")),
        Snooze([1]),  # type: ignore[arg-type]
        WaitForCallback("not a token"),  # type: ignore[arg-type]
    ],
)
def test_a_malformed_outcome_fails_the_attempt_instead_of_raising(result: Any) -> None:
    t = plan(make_row(attempt=1, max_attempts=3), result)
    assert t is not None
    assert (t.move, t.event) == (transitions.RETRY_LATER, Retried)
    assert t.error is not None and t.error.split(":")[0] in ("TypeError", "ValueError")
    last = plan(make_row(attempt=3, max_attempts=3), result)
    assert last is not None and last.state == "failed"


def test_wait_for_callback_accepts_the_token_id() -> None:
    token_id = uuid.uuid4()
    t = plan(make_row(), WaitForCallback(token_id))  # type: ignore[arg-type]
    assert t is not None and (t.state, t.callback_id) == ("waiting_external", token_id)


def test_error_texts_are_storable() -> None:
    t = plan_failure(make_row(), raised(ValueError("bad\x00byte \ud800")))
    assert t.error is not None and "\x00" not in t.error and "bad\\x00byte" in t.error
    t.error.encode()  # no lone surrogate left: PostgreSQL's UTF-8 can store it
    assert t.error_type == "builtins.ValueError"


# -- describe -----------------------------------------------------------------------------
def test_describe_builtin_has_no_module_prefix() -> None:
    text = describe(raised(ValueError("bad value")))
    head, _, trace = text.partition("\n")
    assert head == "ValueError: bad value"
    assert "Traceback" in trace and "ValueError: bad value" in trace


def test_describe_our_own_errors_is_just_the_message() -> None:
    assert describe(raised(UnknownJobKind("unknown job kind: foo"))) == "unknown job kind: foo"
    assert describe(raised(InvalidJobArgs("args do not fit X: y"))) == "args do not fit X: y"


@pytest.mark.parametrize("logged", [True, False])
def test_describe_trims_a_long_traceback(logged: bool) -> None:
    # Two functions in turn: Python folds a run of identical frames into one line.
    def recurse(n: int) -> None:
        if n == 0:
            raise CoreUnitBoom("deep")
        other(n - 1)

    def other(n: int) -> None:
        recurse(n)

    try:
        recurse(30)
    except CoreUnitBoom as exc:
        text = describe(exc, logged=logged)
    lines = text.splitlines()
    assert lines[0] == f"{__name__}.CoreUnitBoom: deep"
    assert lines[1].startswith("... (") and "lines truncated" in lines[1]
    # The cut points to the logs only where the caller logs the whole trace.
    assert ("full trace in logs" in lines[1]) is logged
    # Cut at a frame: the kept part starts with a File line, never a stray source line.
    assert lines[2].lstrip().startswith("File ")
    assert len(lines) <= 1 + 1 + outcomes.TRACEBACK_LINES
    assert text.endswith("CoreUnitBoom: deep\n")  # format_exception's last line, whole


def test_describe_drops_the_marker_lines_and_keeps_the_raising_line() -> None:
    """Python 3.11+ draws `~~~^^^` under a frame's source line; stored alone (or first after
    a cut) it is a stray caret. The raising line itself stays."""

    def deep(n: int, order: dict[str, Any]) -> int:
        if n == 0:
            return int(order["a"]["b"]) + 1
        return deep(n - 1, order) + 0

    try:
        deep(12, {"a": {}})
    except KeyError as exc:
        text = describe(exc)
    assert 'return int(order["a"]["b"]) + 1' in text
    assert not [line for line in text.splitlines() if line.strip() and not line.strip("^~ ")]
    assert "^" not in text


def test_describe_ends_like_format_exception() -> None:
    error = raised(ValueError("bad value"))
    text = describe(error)
    assert text.endswith("".join(traceback.format_exception(error)))
    assert text.endswith("ValueError: bad value\n")


@pytest.mark.parametrize(("logged", "mark"), [(True, "full text in logs)"), (False, "(truncated)")])
def test_describe_caps_a_huge_message(logged: bool, mark: str) -> None:
    text = describe(raised(ValueError("x" * 100_000)), logged=logged)
    assert len(text.encode()) <= MAX_ERROR_BYTES
    assert text.startswith("ValueError: xxx") and text.endswith(mark)


def test_describe_cuts_a_long_message_in_its_head_and_keeps_the_trace_whole() -> None:
    error = raised(CoreUnitBoom("y" * 3000 + "\n" + "z" * 2000))
    text = describe(error)
    assert len(text.encode()) <= MAX_ERROR_BYTES
    head, _, trace = text.partition("\n... (truncated)\n")
    assert head.startswith(f"{__name__}.CoreUnitBoom: yyy")
    assert trace.startswith("Traceback (most recent call last):\n")
    assert trace.endswith("z" * 2000 + "\n")  # the exception's last line, whole


def test_describe_survives_an_exception_whose_str_fails() -> None:
    class CoreUnitUnprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    text = describe(raised(CoreUnitUnprintable()))
    assert text.startswith(f"{__name__}.")
    assert "CoreUnitUnprintable: <exception text unavailable>" in text


def test_describe_keeps_a_short_traceback_whole() -> None:
    text = describe(raised(KeyError("k")))
    assert "truncated" not in text


# -- params and events --------------------------------------------------------------------
def test_snooze_plans_every_column_it_changes() -> None:
    t = plan(make_row(id=5, run_lease=9), result=Snooze(2))
    assert t == Transition(transitions.SNOOZE, delay_seconds=2)


def test_event_for_retried_carries_attempt_error_and_next_run_at() -> None:
    t = plan_failure(make_row(), raised(ValueError("x")))
    committed = make_row(state="retryable", run_at=NOW + dt.timedelta(seconds=2))
    event = event_for(t, committed)
    assert isinstance(event, Retried)
    assert (event.job, event.attempt, event.next_run_at) == (committed, 1, committed.run_at)
    assert event.error.startswith("ValueError: x")


def test_event_for_exhausted_and_cancelled() -> None:
    exhausted = event_for(contract_violation(None), make_row(state="failed", attempt=2))
    assert isinstance(exhausted, Exhausted) and exhausted.attempt == 2
    assert exhausted.error == "WaitForCallback returned without calling register_callback"
    cancelled = event_for(plan(make_row(), result=Cancel("r")), make_row(state="cancelled"))  # type: ignore[arg-type]
    assert isinstance(cancelled, Cancelled) and cancelled.reason == "r"


# -- a kind without a handler (rolling deploys, decision 011) ------------------------------
def test_an_unknown_kind_is_handed_back_uncounted_with_one_entry() -> None:
    t = plan_unknown_kind(make_row(kind="core_new"), UnknownJobKind("unknown job kind"), 3600)
    assert (t.move, t.state, t.event) == (transitions.HAND_BACK, "scheduled", None)
    assert t.delay_seconds == outcomes.HANDBACK_SECONDS
    assert t.error == "no handler for kind 'core_new' in this worker: handed back"
    assert t.error_type == "awa_django.exceptions.UnknownJobKind" and not t.terminal


def handed_back(at: dt.datetime, **changes: Any) -> JobSnapshot:
    entry = {"error": "handed back", "type": "awa_django.exceptions.UnknownJobKind", "at": at}
    return make_row(errors=[{**entry, "at": at.isoformat()}], **changes)


def test_later_hand_backs_add_no_entry_until_the_grace_ran_out() -> None:
    row = handed_back(NOW - dt.timedelta(seconds=3599), attempted_at=NOW)
    again = plan_unknown_kind(row, UnknownJobKind("unknown job kind: x"), 3600)
    assert (again.move, again.error) == (transitions.HAND_BACK, None)
    assert outcomes.handed_back_since(row) == NOW - dt.timedelta(seconds=3599)


def test_after_the_grace_the_job_fails_for_good() -> None:
    row = handed_back(NOW - dt.timedelta(seconds=3600), attempted_at=NOW)
    failed = plan_unknown_kind(row, UnknownJobKind("unknown job kind: x"), 3600)
    assert (failed.state, failed.event, failed.terminal) == ("failed", Exhausted, True)
    assert failed.error == "unknown job kind: x (not run within UNKNOWN_KIND_GRACE, 3600s)"


def test_a_job_claimed_once_it_was_due_for_the_grace_fails_without_a_hand_back() -> None:
    """Workers claim a kind no live worker lists only once its job has been due for the
    grace (decision 032): that claim fails it, counting the grace from run_at."""
    row = make_row(run_at=NOW - dt.timedelta(seconds=3600), attempted_at=NOW)
    failed = plan_unknown_kind(row, UnknownJobKind("unknown job kind: x"), 3600)
    assert (failed.state, failed.event, failed.terminal) == ("failed", Exhausted, True)
    early = make_row(run_at=NOW - dt.timedelta(seconds=3599), attempted_at=NOW)
    assert plan_unknown_kind(early, UnknownJobKind("x"), 3600).state == "scheduled"


def test_a_grace_of_zero_fails_at_once_and_other_entries_do_not_count() -> None:
    at_once = plan_unknown_kind(make_row(), UnknownJobKind("unknown job kind: x"), 0)
    assert (at_once.state, at_once.error) == ("failed", "unknown job kind: x")
    rescued = make_row(errors=[{"error": "heartbeat stale", "at": NOW.isoformat()}])
    assert outcomes.handed_back_since(rescued) is None


# -- unknown kinds: handed back within the grace ------------------------------------------
_UNKNOWN = "awa_django.exceptions.UnknownJobKind"


def _handed_back_at(at: dt.datetime) -> dict[str, Any]:
    return {"error": "handed back", "type": _UNKNOWN, "attempt": 1, "at": at.isoformat()}


def test_a_kind_without_handler_is_handed_back_for_a_few_seconds_uncounted() -> None:
    t = outcomes.plan_unknown_kind(make_row(), UnknownJobKind("unknown job kind: x"), 3600)
    assert (t.move, t.delay_seconds) == (transitions.HAND_BACK, 5.0)
    assert t.error is not None and t.error_type == _UNKNOWN and not t.terminal


def test_a_hand_back_never_outlasts_what_is_left_of_a_short_grace() -> None:
    """With a grace shorter than the hand-back delay, the job is due again when the grace
    ends, so it fails about `grace` seconds after the first hand-back, not 5 s later."""
    error = UnknownJobKind("unknown job kind: x")
    assert outcomes.plan_unknown_kind(make_row(), error, 1).delay_seconds == 1.0
    later = make_row(errors=[_handed_back_at(NOW - dt.timedelta(seconds=0.75))])
    t = outcomes.plan_unknown_kind(later, error, 1)
    assert t.state == "scheduled" and t.delay_seconds == pytest.approx(0.25)
    assert t.error is None  # only the first hand-back leaves an entry


def test_a_kind_unhandled_for_the_whole_grace_fails_for_good() -> None:
    row = make_row(errors=[_handed_back_at(NOW - dt.timedelta(seconds=2))])
    t = outcomes.plan_unknown_kind(row, UnknownJobKind("unknown job kind: x"), 1)
    assert (t.state, t.terminal, t.error_type) == ("failed", True, _UNKNOWN)
    assert t.error == "unknown job kind: x (not run within UNKNOWN_KIND_GRACE, 1s)"
