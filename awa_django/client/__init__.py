"""The Client: the one way to change a job or a queue (enqueue, operator actions, callback
resolution) and to read the operators' figures, on Django's connection so it joins the
caller's transaction. Surfaces import from here, never from `awa_django.storage`."""

from awa_django.bulk import BulkAction, BulkProgress, JobFilter
from awa_django.client.callbacks import ResolveResult
from awa_django.client.client import Client
from awa_django.client.observability import HISTORY_RANGES, Breach, Thresholds, breaches
from awa_django.client.shortcuts import aenqueue, aenqueue_many, enqueue, enqueue_many
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
    "JobFilter",
    "KindFigures",
    "LiveWorker",
    "QueueStats",
    "ResolveResult",
    "RollupPoint",
    "ScheduleSnapshot",
    "Thresholds",
    "aenqueue",
    "aenqueue_many",
    "breaches",
    "enqueue",
    "enqueue_many",
]
