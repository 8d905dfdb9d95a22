"""The exception hierarchy: one leaf per thing a caller can act on (STYLE §9)."""

from __future__ import annotations


class AwaError(Exception):
    """An awa-django operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__class__.__doc__ or "").strip())


class UnknownJobKind(AwaError):
    """No handler is registered for this job kind."""


class InvalidJobArgs(AwaError):
    """The job's args do not fit its args dataclass."""


class SerializationError(AwaError):
    """The job's args (or metadata) cannot be serialised to JSON."""


class PayloadTooLarge(AwaError):
    """The serialised payload is larger than the configured limit."""


class InvalidQueueName(AwaError):
    """Queue names are 1-200 characters of letters, digits, '_', '-', '.' and ':'."""


class InvalidEnqueueOption(AwaError, ValueError):
    """An enqueue option (kind, priority, max_attempts, tags, ...) is out of range, here or
    in the `@job` declaration that supplies its default."""


class UniqueConflict(AwaError):
    """A live job already holds this unique key (UniqueOpts); nothing was enqueued."""

    def __init__(self, message: str | None = None, *, job_id: int | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id  # the job holding the key, when the database named it


class JobNotFound(AwaError):
    """No job with this id exists."""


class InvalidFlowQuery(AwaError, ValueError):
    """A flow read got an option out of range: job ids, limit and depth are ints >= 1."""


class DeadLetterNotFound(AwaError):
    """No dead letter with this job id (never dead-lettered, retried, purged or pruned)."""


class DeadLetterFilterRequired(AwaError, ValueError):
    """A bulk dead-letter operation needs a filter (kind, queue, tag, reason) or an explicit
    `all=True`, so that no call empties the dead letters by accident."""


class InvalidDeadLetterQuery(AwaError, ValueError):
    """A dead-letter listing or retry option is invalid (cursor, limit, queue, priority)."""


class StaleAttempt(AwaError):
    """This attempt no longer owns the job (it was rescued, cancelled or re-claimed)."""


class CallbackNotFound(AwaError):
    """No pending callback with this id (unknown, timed out or already resolved)."""


class InvalidCallbackOption(AwaError, ValueError):
    """A callback operation got an option out of range (timeout, error text, default_action)."""


class InvalidSignature(AwaError):
    """The callback request's signature is missing, malformed, wrong or outside the replay
    window."""


class OutcomeNotStored(AwaError):
    """The database refused to store this attempt's outcome (a value it cannot hold)."""


class OutcomeRefused(AwaError):
    """The database refused this attempt's outcome for a reason of its own (a trigger, a
    constraint, a conflict, a timeout, a lost connection), not for a value it cannot hold:
    the attempt is retried (decision 036)."""


class FollowUpFailed(AwaError):
    """A follow-up builder (`on_completed_enqueue` & co.) raised or returned something that
    cannot be enqueued; the outcome it belonged to was rolled back with it
    (docs/exactly-once.md)."""


class InvalidJobDeclaration(AwaError, TypeError):
    """A `@job` declaration cannot work as written (`atomic=True` on an `async def`
    handler: Django's transactions do not follow an async handler's awaits)."""


class DatabaseUnavailable(AwaError):
    """The database could not be reached."""


class InvalidSchedule(AwaError, ValueError):
    """A cron schedule's declaration is invalid (name, expression, timezone, policy or job
    options)."""


class ScheduleNotFound(AwaError):
    """No cron schedule with this name exists (it was never synced by a leader, or was
    removed)."""


class InvalidQueueLimits(AwaError, ValueError):
    """A queue's runtime limits are invalid: concurrency is a whole number >= 1 and a rate
    limit is (jobs per second > 0, burst >= 1), within the bounds in `awa_django.limits`."""


class InvalidKeyLimits(AwaError, ValueError):
    """A kind's per-key limits are invalid: max_in_flight is a whole number 1..1000 and a
    rate limit is (jobs per second > 0, burst >= 1)."""


class InvalidJobFilter(AwaError, ValueError):
    """A bulk operation's filter or argument is invalid (an unknown state, a naive
    datetime, a state the action never touches, a priority out of range)."""


class BulkOperationNotFound(AwaError):
    """No bulk operation has this id (finished ones are pruned after FAILED_RETENTION)."""


class MetricsUnavailable(AwaError):
    """--metrics-port needs prometheus-client: pip install 'awa-django[metrics]'."""


class InvalidThreshold(AwaError, ValueError):
    """A monitoring threshold is out of range (lag seconds >= 0, failure rate 0..1)."""


class TerminalError(Exception):
    """Raise from a handler to fail the job at once, without further retries."""


class InvalidDependency(InvalidEnqueueOption):
    """`after=` takes 1 to 10,000 job ids (ints) or JobSnapshots, and `on_parent_failure`
    one of 'cancel', 'run', 'discard'; unique jobs cannot wait on parents."""


class ParentNotFound(AwaError):
    """A parent named in `after=` is not a job (nor a dead letter): nothing was enqueued."""

    def __init__(self, message: str | None = None, *, ids: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.ids = ids  # the missing parent ids


class BatchNotFound(AwaError):
    """No batch with this id exists."""
