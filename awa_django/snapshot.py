"""`JobSnapshot`: an immutable snapshot of one committed `awa_jobs_hot` row."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from awa_django.states import TERMINAL_STATES


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    state: str
    priority: int
    attempt: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    attempted_at: datetime | None
    finalized_at: datetime | None
    run_lease: int
    errors: list[dict[str, Any]]
    metadata: dict[str, Any]
    tags: list[str]
    progress: dict[str, Any] | None
    callback_id: uuid.UUID | None
    callback_timeout_at: datetime | None
    result: Any
    attempted_by: list[str]
    # The django.tasks marker ({"backend", "run_after"}) of a job enqueued as a Django task.
    django_task: dict[str, Any] | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> JobSnapshot:
        values = {name: row[name] for name in COLUMNS}
        # The named statements return every jsonb column as text (fragments.JOB_COLUMNS), on
        # Django's connection and the runtime's alike; decoded values (ORM .values()) pass.
        for name in JSON_COLUMNS:
            if isinstance(values[name], str):
                values[name] = json.loads(values[name])
        return cls(**values)

    @classmethod
    def from_row(cls, values: Sequence[Any]) -> JobSnapshot:
        """From a row whose first columns are fragments.JOB_COLUMNS, by position (the hot
        path: claims, completions and enqueue build one per job)."""
        decoded = list(values[: len(COLUMNS)])
        for index in _JSON_INDEXES:
            if isinstance(decoded[index], str):
                decoded[index] = json.loads(decoded[index])
        return cls(*decoded)


JSON_COLUMNS = ("args", "errors", "metadata", "progress", "result", "django_task")
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(JobSnapshot))
_JSON_INDEXES = tuple(COLUMNS.index(name) for name in JSON_COLUMNS)
