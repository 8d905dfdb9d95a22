"""awa-django: a Postgres-native background job queue for Django.

Public API only; see README.md for a tour.
"""

from __future__ import annotations

import warnings
from typing import Any

from awa_django.bulk import BulkAction, BulkProgress, JobFilter
from awa_django.client import (
    Client,
    ResolveResult,
    aenqueue,
    aenqueue_many,
    enqueue,
    enqueue_many,
)
from awa_django.events import (
    Cancelled,
    Completed,
    Event,
    Exhausted,
    Rescued,
    Retried,
    Started,
    WaitingForCallback,
)
from awa_django.exceptions import (
    AwaError,
    BulkOperationNotFound,
    CallbackNotFound,
    InvalidCallbackOption,
    InvalidEnqueueOption,
    InvalidJobArgs,
    InvalidJobFilter,
    InvalidQueueName,
    InvalidSchedule,
    JobNotFound,
    PayloadTooLarge,
    ScheduleNotFound,
    SerializationError,
    StaleAttempt,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
)
from awa_django.execution.context import JobContext
from awa_django.registry.decorators import job, on_any_event, on_event, on_event_kind
from awa_django.registry.schedules import periodic
from awa_django.results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa_django.snapshot import JobSnapshot, ScheduleSnapshot
from awa_django.unique import EnqueueManyResult, UniqueOpts
from awa_django.web.signing import callback_url, sign_callback_request

__all__ = [
    "AwaError",
    "BulkAction",
    "BulkOperationNotFound",
    "BulkProgress",
    "CallbackNotFound",
    "CallbackToken",
    "Cancel",
    "Cancelled",
    "Client",
    "Completed",
    "EnqueueManyResult",
    "Event",
    "Exhausted",
    "InvalidCallbackOption",
    "InvalidEnqueueOption",
    "InvalidJobArgs",
    "InvalidJobFilter",
    "InvalidQueueName",
    "InvalidSchedule",
    "JobContext",
    "JobFilter",
    "JobNotFound",
    "JobSnapshot",
    "PayloadTooLarge",
    "Rescued",
    "ResolveResult",
    "Retried",
    "RetryAfter",
    "ScheduleNotFound",
    "ScheduleSnapshot",
    "SerializationError",
    "Snooze",
    "StaleAttempt",
    "Started",
    "TerminalError",
    "UniqueConflict",
    "UniqueOpts",
    "UnknownJobKind",
    "WaitForCallback",
    "WaitingForCallback",
    "aenqueue",
    "aenqueue_many",
    "callback_url",
    "enqueue",
    "enqueue_many",
    "job",
    "on_any_event",
    "on_event",
    "on_event_kind",
    "periodic",
    "sign_callback_request",
]

# Names of the 0.1 API, kept importable for one release
# (docs/decisions/007-layout-and-vocabulary.md).
_RENAMED = {"Job": ("JobContext", JobContext), "JobRow": ("JobSnapshot", JobSnapshot)}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new_name, value = _RENAMED[name]
        warnings.warn(
            f"awa_django.{name} is now awa_django.{new_name}", DeprecationWarning, stacklevel=2
        )
        return value
    raise AttributeError(f"module 'awa_django' has no attribute {name!r}")
