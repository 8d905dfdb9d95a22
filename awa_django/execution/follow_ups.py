"""Follow-up jobs: what the builders registered with `on_completed_enqueue` & co. return for
committed-to-be events, planned into one bulk insert that the writer of the transition runs
in the transition's own transaction (decision 015).

Planning calls the builders (user code) and checks their jobs as `enqueue` would; it does
no I/O, so the worker, the inline runner and the Client's callback verbs run the query it
returns on whatever connection holds the transition's transaction. Every failure of a
builder, or of a job it returned, is one `FollowUpFailed` naming the builder. It sits below
the Client (DESIGN §10), so the attempt, the rescuer and the Client all import it downward.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from awa_django.codec import decode_args
from awa_django.events import Event
from awa_django.exceptions import FollowUpFailed
from awa_django.execution.rows import EnqueueKwargs, EnqueueOptions, plan_rows
from awa_django.registry import FollowUpRegistration, registry
from awa_django.storage.query import Query
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import unique as unique_sql

logger = logging.getLogger("awa_django.worker")


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A follow-up job with its own enqueue options; build it with `follow_up()`."""

    args: Any
    options: EnqueueOptions


def follow_up(args: Any, **options: Unpack[EnqueueKwargs]) -> FollowUp:
    """A job for a builder to return with enqueue options (`queue`, `priority`, `run_at`,
    `unique`, ...): `follow_up(SendInvoice(7), queue="email", run_at=later)`. A unique
    follow-up whose key is held is skipped, not an error (`on_conflict="skip"`)."""
    return FollowUp(args, EnqueueOptions(**options))


def wanted(event_type: type[Event[Any]], kind: str) -> bool:
    """Some builder wants this outcome of this kind (the writers' cheap check)."""
    return bool(registry.follow_ups_for(kind, event_type))


def insert(events: Sequence[Event[Any]]) -> Query[list[int | None]] | None:
    """The one insert of every follow-up job the builders return for `events` (None: no
    builder returned one). Raises FollowUpFailed; the caller rolls the transition back."""
    jobs: list[tuple[Any, EnqueueOptions]] = []
    for event in events:
        for registration in registry.follow_ups_for(event.job.kind, type(event)):
            jobs.extend(_built(registration, event))
    if not jobs:
        return None
    try:
        rows = plan_rows(jobs)
    except Exception as exc:
        raise FollowUpFailed(
            f"a follow-up job of {events[0].job.kind} cannot be enqueued: {exc}"
        ) from exc
    if rows.unique_keys is None:
        ids = jobs_sql.job_insert_many(**rows.columns())
        return Query(ids.statement, ids.params, _ids_or_none)
    return unique_sql.job_insert_many_unique(
        **rows.columns(), unique_keys=rows.unique_keys, unique_states=rows.unique_states or []
    )


def enqueue_for(events: Sequence[Event[Any]], using: str) -> None:
    """Insert the follow-up jobs of `events` on Django's connection `using`, inside the
    transaction that made the transitions (the Client's callback verbs and cancels)."""
    inserts = insert(events)
    if inserts is not None:
        inserts.run(using)


def _built(
    registration: FollowUpRegistration, event: Event[Any]
) -> list[tuple[Any, EnqueueOptions]]:
    name = getattr(registration.build, "__qualname__", repr(registration.build))
    try:
        args = decode_args(registration.args_type, event.job.args)
        built = registration.build(args, _with_args(event, args))
        return [_job(item) for item in _each(built)]
    except Exception as exc:
        logger.error("follow-up builder %s failed for job %s: %r", name, event.job.id, exc)
        raise FollowUpFailed(
            f"follow-up builder {name} for {type(event).__name__} of job {event.job.id} "
            f"raised {type(exc).__name__}: {exc}"
        ) from exc


def _with_args(event: Event[Any], args: Any) -> Event[Any]:
    return dataclasses.replace(event, args=args)


def _each(built: object) -> Iterable[Any]:
    if built is None:
        return ()
    if isinstance(built, str | bytes | dict) or not isinstance(built, Iterable):
        raise TypeError(
            "a follow-up builder returns None or an iterable of jobs (a list of args "
            f"instances or follow_up(...)s), got {type(built).__name__}"
        )
    return built


def _job(item: object) -> tuple[Any, EnqueueOptions]:
    if isinstance(item, FollowUp):
        return item.args, item.options
    return item, EnqueueOptions()


def _ids_or_none(rows: list[tuple[Any, ...]], count: int) -> list[int | None]:
    return [row[0] for row in rows]
