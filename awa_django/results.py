"""What a handler may return to steer its job's next state (DESIGN §5)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from awa_django.exceptions import TerminalError

__all__ = ["CallbackToken", "Cancel", "RetryAfter", "Snooze", "TerminalError", "WaitForCallback"]


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """Retry after `seconds` (counts as an attempt; exhausts at max_attempts)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Snooze:
    """Run again after `seconds` without counting an attempt."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop the job for good: it moves to `cancelled`."""

    reason: str = "cancelled by handler"


@dataclass(frozen=True, slots=True)
class CallbackToken:
    """A registered external callback: hand `id` to the outside system."""

    id: uuid.UUID
    timeout_at: datetime


@dataclass(frozen=True, slots=True)
class WaitForCallback:
    """Park the job in `waiting_external` until its callback is resolved."""

    token: CallbackToken


Outcome = None | RetryAfter | Snooze | Cancel | WaitForCallback
