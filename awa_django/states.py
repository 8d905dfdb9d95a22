"""Job states: the one vocabulary for a job's place in its lifecycle (DESIGN §2)."""

from __future__ import annotations

from enum import StrEnum

from django.db import models


class JobState(models.TextChoices):
    SCHEDULED = "scheduled"
    # Enqueued with `after=`: waits until its parents ended (docs/workflows-api.md,
    # decision 043). Not terminal, never claimed; a parent's transition moves it on.
    WAITING_PARENTS = "waiting_parents"
    AVAILABLE = "available"
    RUNNING = "running"
    WAITING_EXTERNAL = "waiting_external"
    RETRYABLE = "retryable"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # A job with a concurrency key whose key has no free slot: never claimed; the job that
    # frees a slot admits it (docs/flow-control.md, decision 045).
    WAITING_SLOT = "waiting_slot"


TERMINAL_STATES: frozenset[str] = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}
)


DEFERRED_STATES: frozenset[str] = frozenset({JobState.SCHEDULED, JobState.RETRYABLE})
# A job still to run whose attempt has not begun: due, deferred, or waiting for its parents
# (`after=`) or for a slot of its concurrency key. What `testing.assert_enqueued` calls
# enqueued and what `Client.unhandled_kinds` counts for a kind no live worker has.
WAITING_STATES: tuple[str, ...] = (
    JobState.SCHEDULED,
    JobState.WAITING_PARENTS,
    JobState.AVAILABLE,
    JobState.RETRYABLE,
    JobState.WAITING_SLOT,
)
# Depth counts every state but `completed`: completed rows pile up until pruning and are
# reported as throughput instead, so the count never walks the retained history.
DEPTH_STATES: tuple[str, ...] = tuple(s for s in JobState.values if s != JobState.COMPLETED)


# What a child does when one of its parents fails for good, is cancelled or is
# dead-lettered (decision 043): `cancel` (the child is cancelled, and restored to waiting
# if that parent is retried), `run` (the child runs once every parent ended and can read
# which failed), `discard` (the child row is deleted, for good).
class ParentFailurePolicy(StrEnum):
    CANCEL = "cancel"
    RUN = "run"
    DISCARD = "discard"


class DeadLetterReason(models.TextChoices):
    """Why a job is among the dead letters (docs/dead-letters.md). Labels are the values:
    the admin shows the same words as the Client and the database."""

    # Its last attempt failed, or was rescued.
    MAX_ATTEMPTS_EXHAUSTED = "max_attempts_exhausted", "max_attempts_exhausted"
    # TerminalError, unknown kind, bad args, unstorable outcome, callback contract broken.
    TERMINAL_ERROR = "terminal_error", "terminal_error"
    # Its last attempt's callback timed out.
    CALLBACK_TIMEOUT = "callback_timeout", "callback_timeout"
    # fail_external (or resolve_callback's "fail").
    CALLBACK_FAILED = "callback_failed", "callback_failed"
    # An operator moved the failed job in (Client.dead_letter_failed).
    MANUAL = "manual", "manual"


class RunAtMode(StrEnum):
    """How a move of the transition catalogue reschedules a job for its next attempt
    (`storage.sql.transitions.reschedule`)."""

    KEEP = "keep"  # run_at unchanged
    DELAY = "delay"  # now() + the transition's delay_seconds
    BACKOFF = "backoff"  # now() + the exponential backoff of the attempt
