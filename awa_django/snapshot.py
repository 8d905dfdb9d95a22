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

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> JobSnapshot:
        values = {name: row[name] for name in COLUMNS}
        # The named statements return every jsonb column as text (RETURNING_COLUMNS), on
        # Django's connection and the runtime's alike; decoded values (ORM .values()) pass.
        for name in _JSON_COLUMNS:
            if isinstance(values[name], str):
                values[name] = json.loads(values[name])
        return cls(**values)

    @classmethod
    def from_row(cls, values: Sequence[Any]) -> JobSnapshot:
        """From a row whose first columns are RETURNING_COLUMNS, by position (the hot
        path: claims, completions and enqueue build one per job)."""
        decoded = list(values[: len(COLUMNS)])
        for index in _JSON_INDEXES:
            if isinstance(decoded[index], str):
                decoded[index] = json.loads(decoded[index])
        return cls(*decoded)


_JSON_COLUMNS = ("args", "errors", "metadata", "progress", "result")
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(JobSnapshot))
_JSON_INDEXES = tuple(COLUMNS.index(name) for name in _JSON_COLUMNS)
# The column list every statement that returns a whole job row uses, in JobSnapshot order.
# jsonb columns come back as text on both sides: Django's connection returns jsonb as text
# anyway, while the runtime's psycopg would decode it, and a decoded JSON string (a task
# result "ok", metadata "x") would then be indistinguishable from undecoded text.
RETURNING_COLUMNS = ", ".join(
    f"{name}::text AS {name}" if name in _JSON_COLUMNS else name for name in COLUMNS
)
