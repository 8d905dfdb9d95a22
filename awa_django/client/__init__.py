"""The Client: the one way to change a job or a queue (enqueue, operator actions, callback
resolution) and to read the operators' figures, on Django's connection so it joins the
caller's transaction. Surfaces import from here, never from `awa_django.storage`."""

from awa_django.bulk import BulkAction, BulkProgress, JobFilter
from awa_django.client.callbacks import ResolveResult
from awa_django.client.client import Client
from awa_django.client.observability import HISTORY_RANGES, Breach, Thresholds, breaches
from awa_django.client.shortcuts import (
    Group,
    aenqueue,
    aenqueue_many,
    batch,
    chain,
    enqueue,
    enqueue_many,
    group,
)
from awa_django.client.workflow_verbs import GroupResult
from awa_django.client.workflows import Step, step
from awa_django.snapshot import (
    DeadLetterPage,
    DeadLetterRetry,
    DeadLetterSnapshot,
    KindFigures,
    LiveWorker,
    QueueStats,
    RollupPoint,
    ScheduleSnapshot,
)
from awa_django.states import DEPTH_STATES, DeadLetterReason

__all__ = [
    "DEPTH_STATES",
    "HISTORY_RANGES",
    "Breach",
    "BulkAction",
    "BulkProgress",
    "Client",
    "DeadLetterPage",
    "DeadLetterReason",
    "DeadLetterRetry",
    "DeadLetterSnapshot",
    "Group",
    "GroupResult",
    "JobFilter",
    "KindFigures",
    "LiveWorker",
    "QueueStats",
    "ResolveResult",
    "RollupPoint",
    "ScheduleSnapshot",
    "Step",
    "Thresholds",
    "aenqueue",
    "aenqueue_many",
    "batch",
    "breaches",
    "chain",
    "enqueue",
    "enqueue_many",
    "group",
    "step",
]
