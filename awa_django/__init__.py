"""awa-django: a Postgres-native background job queue for Django.

Public API only; see README.md for a tour.
"""

from __future__ import annotations

import warnings
from typing import Any

from awa_django.bulk import BulkAction, BulkProgress, JobFilter
from awa_django.client import (
    Client,
    Group,
    GroupResult,
    ResolveResult,
    Step,
    aenqueue,
    aenqueue_many,
    batch,
    chain,
    enqueue,
    enqueue_many,
    group,
    step,
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
    BatchNotFound,
    BulkOperationNotFound,
    CallbackNotFound,
    DeadLetterFilterRequired,
    DeadLetterNotFound,
    FollowUpFailed,
    InvalidCallbackOption,
    InvalidDeadLetterQuery,
    InvalidDependency,
    InvalidEnqueueOption,
    InvalidJobArgs,
    InvalidJobDeclaration,
    InvalidJobFilter,
    InvalidQueueLimits,
    InvalidQueueName,
    InvalidSchedule,
    JobNotFound,
    ParentNotFound,
    PayloadTooLarge,
    ScheduleNotFound,
    SerializationError,
    StaleAttempt,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
)
from awa_django.execution.context import JobContext
from awa_django.execution.follow_ups import FollowUp, follow_up
from awa_django.limits import RateLimit
from awa_django.registry.decorators import job, on_any_event, on_event, on_event_kind
from awa_django.registry.follow_ups import (
    on_cancelled_enqueue,
    on_completed_enqueue,
    on_exhausted_enqueue,
    on_rescued_enqueue,
    on_retried_enqueue,
    on_waiting_for_callback_enqueue,
)
from awa_django.registry.schedules import periodic
from awa_django.results import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa_django.snapshot import (
    BatchProgress,
    DeadLetterPage,
    DeadLetterRetry,
    DeadLetterSnapshot,
    JobSnapshot,
    ParentResult,
    ScheduleSnapshot,
)
from awa_django.states import DeadLetterReason, ParentFailurePolicy
from awa_django.unique import EnqueueManyResult, UniqueOpts
from awa_django.web.signing import callback_url, sign_callback_request

__all__ = [
    "AwaError",
    "BatchNotFound",
    "BatchProgress",
    "BulkAction",
    "BulkOperationNotFound",
    "BulkProgress",
    "CallbackNotFound",
    "CallbackToken",
    "Cancel",
    "Cancelled",
    "Client",
    "Completed",
    "DeadLetterFilterRequired",
    "DeadLetterNotFound",
    "DeadLetterPage",
    "DeadLetterReason",
    "DeadLetterRetry",
    "DeadLetterSnapshot",
    "EnqueueManyResult",
    "Event",
    "Exhausted",
    "FollowUp",
    "FollowUpFailed",
    "Group",
    "GroupResult",
    "InvalidCallbackOption",
    "InvalidDeadLetterQuery",
    "InvalidDependency",
    "InvalidEnqueueOption",
    "InvalidJobArgs",
    "InvalidJobDeclaration",
    "InvalidJobFilter",
    "InvalidQueueLimits",
    "InvalidQueueName",
    "InvalidSchedule",
    "JobContext",
    "JobFilter",
    "JobNotFound",
    "JobSnapshot",
    "ParentFailurePolicy",
    "ParentNotFound",
    "ParentResult",
    "PayloadTooLarge",
    "RateLimit",
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
    "Step",
    "TerminalError",
    "UniqueConflict",
    "UniqueOpts",
    "UnknownJobKind",
    "WaitForCallback",
    "WaitingForCallback",
    "aenqueue",
    "aenqueue_many",
    "batch",
    "callback_url",
    "chain",
    "enqueue",
    "enqueue_many",
    "follow_up",
    "group",
    "job",
    "on_any_event",
    "on_cancelled_enqueue",
    "on_completed_enqueue",
    "on_event",
    "on_event_kind",
    "on_exhausted_enqueue",
    "on_rescued_enqueue",
    "on_retried_enqueue",
    "on_waiting_for_callback_enqueue",
    "periodic",
    "sign_callback_request",
    "step",
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
