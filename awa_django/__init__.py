"""awa-django: a Postgres-native background job queue for Django.

Public API only; see README.md for a tour.
"""

from __future__ import annotations

from .callbacks import ResolveResult
from .client import Client, aenqueue, aenqueue_many, client, enqueue, enqueue_many
from .context import Job
from .decorators import job, on_any_event, on_event, on_event_kind
from .events import (
    Cancelled,
    Completed,
    Event,
    Exhausted,
    Rescued,
    Retried,
    Started,
    WaitingForCallback,
)
from .exceptions import (
    AwaError,
    CallbackNotFound,
    InvalidCallbackOption,
    InvalidJobArgs,
    JobNotFound,
    PayloadTooLarge,
    SerializationError,
    StaleAttempt,
    TerminalError,
    UnknownJobKind,
)
from .results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from .signing import callback_url, sign_callback_request
from .snapshot import JobRow

__all__ = [
    "AwaError",
    "CallbackNotFound",
    "CallbackToken",
    "Cancel",
    "Cancelled",
    "Client",
    "Completed",
    "Event",
    "Exhausted",
    "InvalidCallbackOption",
    "InvalidJobArgs",
    "Job",
    "JobNotFound",
    "JobRow",
    "PayloadTooLarge",
    "Rescued",
    "ResolveResult",
    "Retried",
    "RetryAfter",
    "SerializationError",
    "Snooze",
    "StaleAttempt",
    "Started",
    "TerminalError",
    "UnknownJobKind",
    "WaitForCallback",
    "WaitingForCallback",
    "aenqueue",
    "aenqueue_many",
    "callback_url",
    "client",
    "enqueue",
    "enqueue_many",
    "job",
    "on_any_event",
    "on_event",
    "on_event_kind",
    "sign_callback_request",
]
