"""Job states: the one vocabulary for a job's place in its lifecycle (DESIGN §2)."""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    RUNNING = "running"
    WAITING_EXTERNAL = "waiting_external"
    RETRYABLE = "retryable"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES: frozenset[str] = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}
)
DEFERRED_STATES: frozenset[str] = frozenset({JobState.SCHEDULED, JobState.RETRYABLE})
# Depth counts every state but `completed`: completed rows pile up until pruning and are
# reported as throughput instead, so the count never walks the retained history.
DEPTH_STATES: tuple[str, ...] = tuple(s for s in JobState.values if s != JobState.COMPLETED)


class DeadLetterReason(models.TextChoices):
    """Why a job is among the dead letters (docs/dead-letters.md)."""

    MAX_ATTEMPTS_EXHAUSTED = "max_attempts_exhausted"  # its last attempt failed or was rescued
    TERMINAL_ERROR = "terminal_error"  # TerminalError, unknown kind, bad args, unstorable outcome
    CALLBACK_TIMEOUT = "callback_timeout"  # its last attempt's callback timed out
    CALLBACK_FAILED = "callback_failed"  # fail_external (or resolve_callback's "fail")
    MANUAL = "manual"  # an operator moved the failed job in (Client.dead_letter_failed)
