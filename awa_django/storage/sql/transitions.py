"""The job transitions of DESIGN §5, each defined once (decision 041).

A `Move` is one transition as data: the states it may start from (its guard), the columns
it sets and resets, whether it ends the job's lease, what it NOTIFYs, and the event it
announces. Statements do not spell a transition out: they render it here (`assignments`,
`guard`, `required`, `released`, `notify_row`, `update`, `chosen`, `inserted`) and add
only their selector, the rows it applies to (one attempt by id + run_lease, a list of
ids, a bulk window, a callback id, a rescue set, a dead letter). So adding a column that
a retry resets is one edit, in `RETRY`.

`execution/outcomes.py` chooses the move of a worker's outcome (`ATTEMPT_MOVES`, each
rendered by jobs.job_set_state_if_running); a rescue chooses per row between `FAIL` and
`RETRY_LATER` in SQL (`chosen`). Whether an attempt is exhausted and whether its job goes
to the dead letters are decided by the two rules at the end of this module, written once
in each language.

Which lease row goes is the selector's: a guarded attempt write (id + run_lease) deletes
only its own attempt's lease, which a later attempt cannot have taken; a verb from outside
the attempt (an operator, a callback) deletes whatever lease the job has, so a heartbeat of
the attempt learns it lost.

What stays hand-written, and why, is in decision 041: the claim (a transition of its own,
tuned on the hot path), a sequential wait (`job_enter_wait`: it keeps its lease and slot)
and the moves into the dead letters (a DELETE ... INSERT, `dead_letters.enter`).

Not here either: the moves of a workflow's waiting child (`waiting_parents` to available,
scheduled or cancelled, deleted for `discard`, and back from cancelled to waiting). They
are the side effects of its parents' moves, made by migration 0013's trigger in each
parent move's transaction, whichever statement made it (decision 043).
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass, replace

from awa_django.bulk import ACTION_STATES, BulkAction
from awa_django.channels import channel_sql
from awa_django.events import (
    Cancelled,
    Completed,
    Event,
    Exhausted,
    Retried,
    WaitingForCallback,
)
from awa_django.states import JobState, RunAtMode
from awa_django.storage.sql.fragments import backoff, notify_cancel


class Notify(enum.Enum):
    NONE = "none"
    QUEUE = "queue"  # wakes the queue's dispatchers: the job is available now
    CANCEL = "cancel"  # tells a running or parked attempt's worker it was cancelled


_TERMINAL = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
# Resolving a callback consumes it: at most one resolution (callbacks.py's docstring).
CALLBACK_CLEARED = (
    ("callback_id", "NULL"),
    ("callback_timeout_at", "NULL"),
    ("callback_result", "NULL"),
)
# A job made to wait again by an operator or by promotion gets its enqueued priority back
# and ages anew (decision 018 §6); a callback's retry keeps the priority it had.
PRIORITY_RESTORED = (
    ("priority", "coalesce(j.original_priority, j.priority)"),
    ("original_priority", "NULL"),
)


@dataclass(frozen=True, slots=True)
class Move:
    """One transition. `sets` are (column, SQL expression) pairs, expressions over the
    alias `j` of awa_jobs_hot; `inputs` name columns whose value the statement supplies
    (a completion's result): a statement that supplies none leaves them as they are.
    `sources` empty means any state that is not terminal."""

    name: str
    state: JobState
    sets: tuple[tuple[str, str], ...]
    sources: tuple[JobState, ...]
    releases: bool  # the job's lease row goes when the move commits
    notify: Notify
    event: type[Event] | None  # what a committed move announces (None: nothing)
    inputs: tuple[str, ...] = ()
    # (column, SQL expression) pairs the row must also match, beside its state: a park's
    # callback token must still be the job's current one.
    requires: tuple[tuple[str, str], ...] = ()

    def variant(
        self,
        name: str,
        *sets: tuple[str, str],
        sources: tuple[JobState, ...] | None = None,
        announced: bool = True,
    ) -> Move:
        """This move with more columns set (a column it sets already takes the new value,
        in its place), other sources, or announcing nothing."""
        return replace(
            self,
            name=name,
            sets=tuple({**dict(self.sets), **dict(sets)}.items()),
            sources=self.sources if sources is None else sources,
            event=self.event if announced else None,
        )

    def assignments(self, *extra: tuple[str, str], indent: str = "        ", **inputs: str) -> str:
        """The SET list: `state`, then `sets`, then `extra` (a selector's own columns; one
        already set is set once, the later value winning), then the `inputs` given, wrapped
        at 88 columns with `indent` on each continued line."""
        unknown = set(inputs) - set(self.inputs)
        if unknown:
            raise ValueError(f"{self.name} takes no input {sorted(unknown)}")
        columns = _columns(self, *extra)
        columns.update((name, inputs[name]) for name in self.inputs if name in inputs)
        return _wrapped([f"{column} = {value}" for column, value in columns.items()], indent)

    def inserted(self, copied: Collection[str], *extra: tuple[str, str]) -> tuple[str, str]:
        """An INSERT's column list and its SELECT list for a job row rebuilt from another
        table's row aliased `j` (a dead letter): this move's columns as `assignments` sets
        them, the `copied` columns as they are (a move's column is not copied)."""
        columns = _columns(self, *extra)
        columns = {name: f"j.{name}" for name in copied if name not in columns} | columns
        names = _wrapped(list(columns), "        ", start=len("    INSERT INTO awa_jobs_hot ("))
        return names, _wrapped(list(columns.values()), "        ", start=len("    SELECT "))

    def guard(self, alias: str = "", *, indexable: bool = True) -> str:
        """The states the move starts from, as a condition on `alias`.state; not
        `indexable`, a form no index can serve (the batched completion's planner trap)."""
        column = f"{alias}.state" if alias else "state"
        if not indexable:
            column += " || ''"
        if not self.sources:
            return f"{column} NOT IN ({_listed(_TERMINAL)})"
        if len(self.sources) == 1:
            return f"{column} = '{self.sources[0]}'"
        return f"{column} IN ({_listed(self.sources)})"

    def required(self, alias: str = "j") -> str:
        """`requires` as conditions to AND onto a selector's WHERE ("" when none)."""
        return "".join(f" AND {alias}.{column} = {value}" for column, value in self.requires)

    def released(self, moved: str, alias: str = "m", *, attempt: bool = False) -> str:
        """The CTE `released` that deletes the lease of each row of the CTE `moved`: only
        the moved attempt's (`attempt`), or whichever the job has."""
        if not self.releases:
            raise ValueError(f"{self.name} keeps the lease")
        return released(moved, alias, attempt=attempt)

    def notify_row(self, prior_state: str = "prior_state") -> str:
        """A select-list expression sending this move's NOTIFY for one moved row (columns
        queue, id, run_lease; `prior_state` for a cancel's hint)."""
        if self.notify is Notify.QUEUE:
            return f"pg_notify({channel_sql('queue')}, '')::text"
        if self.notify is Notify.CANCEL:
            return (
                f"CASE WHEN {prior_state} IN ('running', 'waiting_external')\n"
                f"            THEN {notify_cancel('id', 'run_lease')} END"
            )
        raise ValueError(f"{self.name} notifies nobody")


def released(moved: str, alias: str = "m", *, attempt: bool = False) -> str:
    """Move.released, for rows that several moves moved (a rescue's: FAIL, RETRY_LATER or
    into the dead letters, each of which ends the attempt)."""
    own = f" AND l.run_lease = {alias}.run_lease" if attempt else ""
    return f"""released AS (
    DELETE FROM awa_active_leases l USING {moved} {alias}
    WHERE l.job_id = {alias}.id{own}
)"""


def update(
    move: Move,
    *extra: tuple[str, str],
    where: str,
    returning: str,
    source: str = "",
    alias: str = "j",
    **inputs: str,
) -> str:
    """The UPDATE of a CTE that applies `move` (with a selector's `extra` columns and the
    `inputs` it supplies) to the rows `where` picks, joined to `source` if given."""
    table = f"awa_jobs_hot {alias}" if alias else "awa_jobs_hot"
    joined = f"\n    FROM {source}" if source else ""
    return f"""UPDATE {table}
    SET {move.assignments(*extra, **inputs)}{joined}
    WHERE {where}
    RETURNING {returning}"""


def chosen(
    condition: str, then: Move, otherwise: Move, *extra: tuple[str, str], indent: str = "    "
) -> str:
    """A SET list (one column a line) that applies `then` to the rows where `condition`
    holds and `otherwise` to the others: a column both set alike is set once, one they set
    differently (or only one sets) becomes a CASE, the other keeping the row's value.
    `extra` (a selector's own columns) apply to every row."""
    first, second = _columns(then), _columns(otherwise)
    lines = []
    for column in dict.fromkeys([*first, *second]):
        yes, no = first.get(column, f"j.{column}"), second.get(column, f"j.{column}")
        value = yes if yes == no else f"CASE WHEN {condition} THEN {yes} ELSE {no} END"
        lines.append(f"{column} = {value}")
    lines += [f"{column} = {value}" for column, value in extra]
    return f",\n{indent}".join(lines)


def _columns(move: Move, *extra: tuple[str, str]) -> dict[str, str]:
    """The columns `move` sets, then a selector's `extra` ones (the later value winning)."""
    return dict([("state", f"'{move.state}'"), *move.sets, *extra])


def _listed(states: tuple[JobState, ...]) -> str:
    return ", ".join(f"'{state}'" for state in states)


def _wrapped(items: list[str], indent: str, width: int = 88, start: int = len("    SET ")) -> str:
    text, column = "", start
    for index, item in enumerate(items):
        piece = item if index == 0 else f", {item}"
        if index and column + len(piece) > width:
            text, column, piece = text + ",\n" + indent, len(indent), item
        text, column = text + piece, column + len(piece)
    return text


# T13 / the worker's Completed: finalized, progress cleared (kept on failure), the result
# written when the statement has one.
COMPLETE = Move(
    "complete",
    JobState.COMPLETED,
    (("finalized_at", "now()"), ("progress", "NULL")),
    (JobState.RUNNING,),
    True,
    Notify.NONE,
    Completed,
    inputs=("result",),
)

# T19: any job not yet terminal. A running attempt's later outcome is stale from here on.
CANCEL = Move(
    "cancel",
    JobState.CANCELLED,
    (("finalized_at", "now()"), *CALLBACK_CLEARED),
    (),
    True,
    Notify.CANCEL,
    Cancelled,
)

# T15: a parked job back to available with the attempts reset; errors and run_lease kept.
RETRY = Move(
    "retry",
    JobState.AVAILABLE,
    (
        ("attempt", "0"),
        ("run_at", "now()"),
        ("finalized_at", "NULL"),
        *CALLBACK_CLEARED,
    ),
    (JobState.WAITING_EXTERNAL,),
    True,
    Notify.QUEUE,
    Retried,
)
# An operator's retry of a workflow child some of whose parents have not ended (it was
# cancelled while it waited), or are retried by the same statement (a bulk retry of
# everything failed or cancelled takes a failed parent and the child its failure
# cancelled together), makes it wait for them again (decision 043): made available, it
# would run before them. Parents that all ended and stay ended, failed ones included, do
# not hold it: the operator's retry runs it. The plain case reads no other table. Every
# statement rendering it names the ids it retries in a CTE `retrying`.
WAITS_FOR_PARENTS = (
    "state",
    "CASE WHEN NOT j.has_parents THEN 'available'"
    " WHEN EXISTS (SELECT FROM awa_job_waits w WHERE w.job_id = j.id"
    " AND w.pending_parents > 0)"
    " OR EXISTS (SELECT FROM awa_job_dependencies d JOIN retrying rt ON rt.id = d.parent_id"
    " WHERE d.child_id = j.id) THEN 'waiting_parents' ELSE 'available' END",
)


# T21, an operator's retry (`retry`, `retry_many`, `bulk_retry`): failed, cancelled and
# parked jobs, and beyond Awa's T21 a retryable one (it runs now instead of after its
# backoff); the enqueued priority is restored; no event (decision 018). A child waits
# again for its parents that have not ended (WAITS_FOR_PARENTS).
OPERATOR_RETRY = RETRY.variant(
    "operator retry",
    *PRIORITY_RESTORED,
    WAITS_FOR_PARENTS,
    sources=tuple(JobState(state) for state in ACTION_STATES[BulkAction.RETRY]),
    announced=False,
)


def operator_retry_after(moved: str, alias: str = "m") -> str:
    """The CTEs that follow OPERATOR_RETRY's update of the rows of CTE `moved`: `released`
    (their leases) and `superseded`: a child its parents' policy had cancelled is the
    operator's now (decision 043). Without it, a later cancel of that child by anyone was
    taken for the policy's, and undone by a retry of the failed parent. One primary-key
    probe of awa_job_waits per retried row."""
    return f"""{OPERATOR_RETRY.released(moved, alias)}, superseded AS (
    UPDATE awa_job_waits w SET cancelled_by_parents = false
    FROM {moved} {alias}
    WHERE w.job_id = {alias}.id AND w.cancelled_by_parents
)"""


# T26, a dead letter retried (`retry_dead_letters`): the row goes back into awa_jobs_hot as
# a retry leaves a job (dead_letters.py renders it as an INSERT, `inserted`: no state to
# start from applies); no event.
DEAD_LETTER_RETRY = RETRY.variant("dead-letter retry", sources=(), announced=False)


# T12: a parked job runs again with the payload its handler reads (`callback_result`, an
# input); the lease is refreshed or created by the statement (callbacks.py), not released.
RESUME = Move(
    "resume",
    JobState.RUNNING,
    (),
    (JobState.WAITING_EXTERNAL, JobState.RUNNING),
    False,
    Notify.NONE,
    None,
    inputs=("callback_result",),
)

# -- how an attempt ends: the worker's outcomes, the rescues, a callback's failure ---------
# An attempt that ends other than by completing consumes its callback, as a resolution
# does: a resume payload it never read must not reach the job's next attempt.


def reschedule(mode: RunAtMode) -> tuple[str, str]:
    """The `run_at` a move into a later attempt sets: after the handler's delay (param
    delay_seconds, at least 0) or after the backoff of the attempt that ended."""
    if mode is RunAtMode.DELAY:
        later = "greatest(%(delay_seconds)s::float8, 0)"
    elif mode is RunAtMode.BACKOFF:
        later = backoff("j.attempt")
    else:
        raise ValueError(f"{mode} does not move run_at")
    return ("run_at", f"now() + make_interval(secs => {later})")


_ATTEMPT_ENDS = (JobState.RUNNING, JobState.WAITING_EXTERNAL)

# A failed attempt that is retried later, after a backoff on the database clock (DESIGN
# §5): a handler's error on a non-last attempt, a rescue of one (decision 002; the rescue
# announces `Rescued` instead, decision 035).
RETRY_LATER = Move(
    "retry later",
    JobState.RETRYABLE,
    (("finalized_at", "now()"), reschedule(RunAtMode.BACKOFF), *CALLBACK_CLEARED),
    _ATTEMPT_ENDS,
    True,
    Notify.NONE,
    Retried,
)
# RetryAfter on a non-last attempt: retried after the handler's own delay.
RETRY_AFTER = RETRY_LATER.variant("retry after", reschedule(RunAtMode.DELAY))

# T14 / a last attempt's failure or rescue: failed for good, errors kept (a statement adds
# the entry that says why), progress kept (it shows how far the job got).
FAIL = Move(
    "fail",
    JobState.FAILED,
    (("finalized_at", "now()"), *CALLBACK_CLEARED),
    _ATTEMPT_ENDS,
    True,
    Notify.NONE,
    Exhausted,
)

# Snooze: runs again after the handler's delay, the attempt not counted (refunded) and
# not finalized: it did not fail.
SNOOZE = Move(
    "snooze",
    JobState.SCHEDULED,
    (reschedule(RunAtMode.DELAY), ("attempt", "j.attempt - 1"), *CALLBACK_CLEARED),
    (JobState.RUNNING,),
    True,
    Notify.NONE,
    None,
)
# A worker without the job's handler gives it back (decision 011): a snooze, whose first
# occurrence leaves an error entry (the statement's input) saying when it started.
HAND_BACK = SNOOZE.variant("hand back")

# T11, WaitForCallback (park mode): the job waits for its callback, which stays; the
# attempt's slot and lease are freed. The token the handler returned must still be the
# job's current callback (param callback_id), else nothing moves.
# A park gives up the job's concurrency-key slot (key_slot NULL: the release trigger of
# migration 0014 frees it), which a sequential wait (jobs.job_enter_wait) keeps (045).
PARK = Move(
    "park",
    JobState.WAITING_EXTERNAL,
    (("key_slot", "NULL"),),
    (JobState.RUNNING,),
    True,
    Notify.NONE,
    WaitingForCallback,
    requires=(("callback_id", "%(callback_id)s::uuid"),),
)

# The moves that end a running attempt by its own outcome, but for a plain completion
# (COMPLETE, batched): what jobs.job_set_state_if_running renders, one statement each.
ATTEMPT_MOVES = (RETRY_LATER, RETRY_AFTER, FAIL, CANCEL, SNOOZE, HAND_BACK, PARK)

# Due scheduled and retryable jobs become available (T05, T08): the queue is woken; the
# enqueued priority comes back (decision 018 §6).
PROMOTE = Move(
    "promote",
    JobState.AVAILABLE,
    (("run_at", "now()"), *PRIORITY_RESTORED),
    (JobState.SCHEDULED, JobState.RETRYABLE),
    False,
    Notify.QUEUE,
    None,
)


# -- failing for good: exhausted? dead-lettered? ------------------------------------------
# Decided here for every path: the worker's outcomes (execution/outcomes.py, in Python, on
# the claimed row), and the rescues and callback failures (in SQL, per row, in the one
# statement that moves the job). Each rule is written in both languages side by side, and
# test_transition_catalogue evaluates the SQL against the Python over a grid of rows.


def exhausted(attempt: int, max_attempts: int) -> bool:
    """The attempt was the job's last: attempts are a hard bound (decision 009), so a
    failure of it, a retry it asked for or a rescue of it ends the job `failed`."""
    return attempt >= max_attempts


def exhausted_sql(alias: str) -> str:
    """`exhausted` of the row aliased `alias`."""
    return f"{alias}.attempt >= {alias}.max_attempts"


def dead_lettered(queue: str, dead_letter_queues: Collection[str]) -> bool:
    """A job that fails for good on `queue` moves to the dead letters instead of staying
    `failed` (decision 016): `dead_letter_queues` are AwaSettings.dead_letter_queues."""
    return queue in dead_letter_queues


def dead_lettered_sql(alias: str = "") -> str:
    """`dead_lettered` of the row aliased `alias`. Param: dead_letter_queues text[]."""
    column = f"{alias}.queue" if alias else "queue"
    return f"{column} = ANY(%(dead_letter_queues)s::text[])"
