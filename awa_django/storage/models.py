"""Storage: every table awa-django owns (DESIGN §3). Hot-path SQL lives in `sql/`."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models.functions import Now

from awa_django.conf import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    MAX_MAX_ATTEMPTS,
    MAX_PRIORITY,
    MIN_MAX_ATTEMPTS,
    MIN_PRIORITY,
)
from awa_django.states import DEPTH_STATES, DeadLetterReason, JobState

# Registered with the app through this import (Django loads models from here).
from awa_django.storage.workflows import (  # noqa: F401
    Batch,
    BatchMember,
    EventAnnouncement,
    JobDependency,
    JobWait,
)

TERMINAL = ("completed", "failed", "cancelled")

# The lookup indexes of `awa_jobs_hot` are partial (docs/decisions/028-index-diet.md). No
# update of a job is HOT (`state` is in index predicates), so each of its three writes
# (enqueue, claim, completion) adds an entry to every index whose predicate the new row
# version matches; an index skips the states whose rows another index already finds:
# - the queue index skips `available` rows: the dispatch index finds those by queue;
# - the state index skips `available` (the dispatch index) and `completed` rows (most of
#   the table, dense in the primary key's id order);
# - the tags index skips untagged jobs, the common case (GIN stores an entry for `{}`).
# PostgreSQL uses a partial index only for a WHERE clause that implies its predicate, so a
# filter that needs one names the predicate too: `in_queue()` and `has_tag()` below, and
# the same text in storage/sql/bulk.py's filter.
QUEUE_INDEXED = ~models.Q(state="available")
STATE_INDEXED = ~models.Q(state__in=["available", "completed"])
TAGGED = ~models.Q(tags=[])
# The depth states (DESIGN §2: all but completed) whose rows the state index holds: all but
# `available`, which the dispatch index counts. Each count reads one index, never the table.
INDEXED_DEPTH_STATES = tuple(s for s in DEPTH_STATES if s != JobState.AVAILABLE)


def in_queue(queue: str) -> models.Q:
    """`queue = <queue>`, written so that each state's rows come from an index: `available`
    ones through the dispatch index, the others through the queue index (a BitmapOr of
    the two where the queue is small, the primary key backwards where it is not)."""
    return models.Q(queue=queue) & (models.Q(state="available") | QUEUE_INDEXED)


def has_tag(tag: str) -> models.Q:
    """Jobs tagged `tag`, through the tags index (which holds only tagged jobs)."""
    return models.Q(tags__contains=[tag]) & TAGGED


class StateInUniqueStates(models.Func):
    """`awa_state_in_unique_states(unique_states, state)`: whether a job in `state` holds
    its unique key under its `unique_states` mask (Awa's bit(8) text, bit 0 = scheduled).
    An IMMUTABLE SQL function created by migration 0004, so an index predicate can use it;
    NULL (no key) for a job enqueued without UniqueOpts."""

    function = "awa_state_in_unique_states"
    output_field = models.BooleanField()


# The unique index's predicate, spelled once: the model's constraint and the ON CONFLICT
# inference clause of the unique inserts (storage/sql/jobs.py) must name the same one.
UNIQUE_HOLDS_KEY = models.Q(StateInUniqueStates("unique_states", "state"))


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=200)
    queue = models.CharField(max_length=200, default=DEFAULT_QUEUE)
    args = models.JSONField(default=dict)
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.AVAILABLE)
    # Lower runs first; the range and the default are in conf (MIN_PRIORITY..MAX_PRIORITY).
    priority = models.SmallIntegerField(default=DEFAULT_PRIORITY)
    attempt = models.SmallIntegerField(default=0)
    max_attempts = models.SmallIntegerField(default=DEFAULT_MAX_ATTEMPTS)
    run_at = models.DateTimeField(db_default=Now())
    created_at = models.DateTimeField(db_default=Now())
    attempted_at = models.DateTimeField(null=True, blank=True)
    finalized_at = models.DateTimeField(null=True, blank=True)
    run_lease = models.BigIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    tags = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    progress = models.JSONField(null=True, blank=True)
    callback_id = models.UUIDField(null=True, blank=True)
    callback_timeout_at = models.DateTimeField(null=True, blank=True)
    unique_key = models.BinaryField(null=True, blank=True)
    unique_states = models.CharField(max_length=8, null=True, blank=True)
    # Return value of a successful django.tasks task (JSON, size-limited).
    result = models.JSONField(null=True, blank=True)
    # The payload resume_external hands to a handler waiting in place; taken (and cleared)
    # by that handler. SQL NULL: none pending (a JSON null payload is the jsonb 'null').
    callback_result = models.JSONField(null=True, blank=True)
    # The django.tasks marker ({"backend": alias, "run_after": iso}) of a Django task.
    django_task = models.JSONField(null=True, blank=True)
    # Worker ids of the most recent attempts (at most 10), for django.tasks' worker_ids.
    attempted_by = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    # The priority the job was enqueued with, set when priority aging first lifts it
    # (NULL: never aged); promotion and retry put it back (decision 018).
    original_priority = models.SmallIntegerField(null=True, blank=True)
    # Per-key concurrency (docs/flow-control.md, decision 045): the 16-byte digest of the
    # job's concurrency key, set by the insert trigger from metadata["_awa_concurrency"]
    # (NULL: no key, the job pays nothing), and the slot of awa_key_slots the job holds
    # while it is admitted (NULL: none). Written only by the triggers of migration 0014.
    concurrency_key = models.BinaryField(null=True, blank=True, editable=False)
    key_slot = models.SmallIntegerField(null=True, blank=True, editable=False)
    # Workflows (decision 043): whether a job has children or batch membership (its state
    # changes then run the fan-in trigger), and whether it has parents (its deletion then
    # clears its dependency rows). Both are only read by the triggers' WHEN clauses, so a
    # job outside any workflow pays one boolean test per write. db_default: the COPY path
    # and every INSERT that does not name them get false from the database.
    has_dependents = models.BooleanField(db_default=False, default=False, editable=False)
    has_parents = models.BooleanField(db_default=False, default=False, editable=False)

    class Meta:
        db_table = "awa_jobs_hot"
        ordering = ["-id"]
        # One permission per operator action, so each admin action can be granted alone.
        permissions = [
            ("retry_job", "Can retry jobs"),
            ("cancel_job", "Can cancel jobs"),
            ("complete_callback", "Can complete external callbacks"),
            ("fail_callback", "Can fail external callbacks"),
            ("retry_callback", "Can retry external callbacks"),
            ("pause_queue", "Can pause and resume queues"),
            ("set_queue_limits", "Can set queue limits (concurrency, rate)"),
        ]
        indexes = [
            models.Index(
                fields=["queue", "priority", "run_at", "id"],
                name="awa_jobs_dispatch_idx",
                condition=models.Q(state="available"),
            ),
            models.Index(
                fields=["run_at"],
                name="awa_jobs_promote_idx",
                condition=models.Q(state__in=["scheduled", "retryable"]),
            ),
            models.Index(
                fields=["callback_timeout_at"],
                name="awa_jobs_cb_timeout_idx",
                condition=models.Q(state="waiting_external"),
            ),
            models.Index(
                fields=["finalized_at"],
                name="awa_jobs_finalized_idx",
                condition=models.Q(state__in=TERMINAL),
            ),
            # cancel_by_unique_key's lookup (the oldest live job with a key, holding it or
            # not); only rows enqueued with UniqueOpts have an entry.
            models.Index(
                fields=["unique_key"],
                name="awa_jobs_unique_key_idx",
                condition=models.Q(unique_key__isnull=False),
            ),
            # The one lookup index every job enters at each write: a kind's jobs in any
            # state, `available` and `completed` ones included, have no other way in.
            models.Index(fields=["kind", "state"], name="awa_jobs_kind_state_idx"),
            models.Index(
                fields=["queue", "state"],
                name="awa_jobs_queue_state_part_idx",
                condition=QUEUE_INDEXED,
            ),
            # (state, id) serves a state's list newest first (read backwards) and the bulk
            # operations' chunks from their cursor; the queue is carried so that the
            # depth per queue and state is counted from the index alone. Ascending: a
            # claim's entry goes to the end of the `running` range, where a full page
            # splits to the right and stays full (descending split pages in half).
            models.Index(
                fields=["state", "id"],
                name="awa_jobs_state_id_part_idx",
                include=["queue"],
                condition=STATE_INDEXED,
            ),
            GinIndex(fields=["tags"], name="awa_jobs_tags_part_idx", condition=TAGGED),
            # The next job of a key to admit when a slot frees, in dispatch order; only
            # jobs waiting for a slot have an entry.
            models.Index(
                fields=["concurrency_key", "priority", "run_at", "id"],
                name="awa_jobs_waiting_slot_idx",
                condition=models.Q(state="waiting_slot"),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["callback_id"],
                name="awa_jobs_callback_uniq",
                condition=models.Q(callback_id__isnull=False),
            ),
            # Unique jobs (docs/decisions/012-unique-jobs.md): at most one row per key among
            # the rows whose state is in their own unique_states. A row leaves the index in
            # the statement that moves it out of its states, which frees the key.
            models.UniqueConstraint(
                fields=["unique_key"], name="awa_jobs_unique_idx", condition=UNIQUE_HOLDS_KEY
            ),
            models.CheckConstraint(
                condition=models.Q(priority__gte=MIN_PRIORITY, priority__lte=MAX_PRIORITY),
                name="awa_jobs_priority_range",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    max_attempts__gte=MIN_MAX_ATTEMPTS, max_attempts__lte=MAX_MAX_ATTEMPTS
                ),
                name="awa_jobs_max_attempts_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.id} ({self.state})"


class ActiveLease(models.Model):
    """One narrow row per live attempt, from its first heartbeat on (or from its claim on a
    queue with a short deadline; decision 030). Heartbeats touch only this table, so the
    wide job row is written once at claim and once at finalization."""

    job_id = models.BigIntegerField(primary_key=True)
    run_lease = models.BigIntegerField()
    queue = models.CharField(max_length=200)
    worker_id = models.CharField(max_length=200)
    claimed_at = models.DateTimeField(db_default=Now())
    heartbeat_at = models.DateTimeField(db_default=Now())
    deadline_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "awa_active_leases"
        indexes = [
            models.Index(fields=["heartbeat_at"], name="awa_leases_heartbeat_idx"),
            models.Index(
                fields=["deadline_at"],
                name="awa_leases_deadline_idx",
                condition=models.Q(deadline_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"lease of job {self.job_id} (run_lease {self.run_lease})"


class QueueState(models.Model):
    queue = models.CharField(max_length=200, primary_key=True)
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)
    # Runtime overrides (Client.set_queue_limits), re-read by every worker within
    # OVERRIDE_REFRESH_INTERVAL; NULL = the queue's settings apply. Decision 017.
    concurrency_override = models.PositiveIntegerField(null=True, blank=True)
    rate_override = models.FloatField(null=True, blank=True)
    burst_override = models.PositiveIntegerField(null=True, blank=True)
    limits_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "awa_queue_state"
        constraints = [
            # A rate override always carries its burst, so a worker never guesses one.
            models.CheckConstraint(
                condition=models.Q(rate_override__isnull=True, burst_override__isnull=True)
                | models.Q(rate_override__gt=0, burst_override__gte=1),
                name="awa_queue_state_rate_override_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(concurrency_override__isnull=True)
                | models.Q(concurrency_override__gte=1),
                name="awa_queue_state_concurrency_override_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue} ({'paused' if self.paused else 'running'})"


class RateBucket(models.Model):
    """A queue's global rate-limit token bucket, shared by every worker process; written
    only by `rate_bucket_take` / `rate_bucket_give_back` (storage/sql/queues.py)."""

    queue = models.CharField(max_length=200, primary_key=True)
    tokens = models.FloatField()
    # The tokens the last take granted (RETURNING reports it; see rate_bucket_take).
    granted = models.IntegerField(default=0)
    refilled_at = models.DateTimeField()

    class Meta:
        db_table = "awa_rate_buckets"

    def __str__(self) -> str:
        return f"{self.queue}: {self.tokens:.2f} tokens"


class KeySlot(models.Model):
    """One of a concurrency key's `max_in_flight` slots (decision 045): held by at most one
    admitted job (`job_id`), taken and freed only by the triggers of migration 0014 under
    the slot row's lock. `key_text` is the key as enqueued (at most 200 characters), for
    people: the jobs carry only its digest."""

    pk = models.CompositePrimaryKey("key_digest", "slot")
    key_digest = models.BinaryField()
    slot = models.SmallIntegerField()
    job_id = models.BigIntegerField(null=True, blank=True)
    key_text = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "awa_key_slots"

    def __str__(self) -> str:
        return f"{self.key_text} slot {self.slot}"


class KeyBucket(models.Model):
    """A concurrency key's rate-limit token bucket (`key_rate_limit`), taken at admission
    by the trigger of migration 0014 (decision 045)."""

    key_digest = models.BinaryField(primary_key=True)
    tokens = models.FloatField()
    refilled_at = models.DateTimeField()

    class Meta:
        db_table = "awa_key_buckets"

    def __str__(self) -> str:
        return f"{self.key_digest.hex()}: {self.tokens:.2f} tokens"


class KeyLimit(models.Model):
    """A runtime override of a kind's per-key limits (Client.set_key_limits), read by every
    admission of a keyed job of that kind; NULL fields keep the declared value."""

    kind = models.CharField(max_length=200, primary_key=True)
    max_in_flight = models.PositiveIntegerField(null=True, blank=True)
    rate = models.FloatField(null=True, blank=True)
    burst = models.PositiveIntegerField(null=True, blank=True)
    updated_by = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "awa_key_limits"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(max_in_flight__isnull=True)
                | models.Q(max_in_flight__gte=1, max_in_flight__lte=1000),
                name="awa_key_limits_max_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(rate__isnull=True, burst__isnull=True)
                | models.Q(rate__gt=0, burst__gte=1),
                name="awa_key_limits_rate_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"key limits of {self.kind}"


class WorkerInstance(models.Model):
    """Liveness of each worker process, refreshed by the runtime (for the dashboard)."""

    worker_id = models.CharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(default=dict)
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    leader = models.BooleanField(default=False)
    shutting_down = models.BooleanField(default=False)
    completed_count = models.BigIntegerField(default=0)
    # The kinds this process has handlers for, and whether it also runs django.tasks tasks
    # (their kinds are import paths, resolved on demand): what "no live worker handles
    # kind X" is computed from (DESIGN §4, rolling deploys).
    # Defaults in the database too: a worker of the previous release keeps registering
    # while a rolling deploy migrates.
    kinds = models.JSONField(default=list, db_default=[])
    serves_tasks = models.BooleanField(default=False, db_default=False)
    # Lifecycle events this process dropped because its hook backlog was full.
    hooks_dropped = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        db_table = "awa_worker_instances"

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"


class LeaderLease(models.Model):
    """Maintenance leadership: a row with an expiry, renewed well inside its TTL."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200)
    acquired_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "awa_leader_lease"

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder}"


class LeaseEpoch(models.Model):
    """The last lease epoch handed out (decision 029): one row, raised by one and committed
    to disk each time a worker connection opens. Claims on that connection hand out
    run_leases from `epoch * EPOCH_SPACE` up, so no claim lost in a crash repeats."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    epoch = models.BigIntegerField(default=0)

    class Meta:
        db_table = "awa_lease_epochs"

    def __str__(self) -> str:
        return f"lease epoch {self.epoch}"


class CronSchedule(models.Model):
    """One cron schedule, synced from its `periodic(...)` declaration by the maintenance
    leader. The leader updates the definition fields, never `paused` nor `last_fire_at`:
    `last_fire_at` is the compare-and-swap field every fire moves (decision 013)."""

    name = models.CharField(max_length=200, primary_key=True)
    expression = models.CharField(max_length=200)
    timezone = models.CharField(max_length=100, default="UTC")
    kind = models.CharField(max_length=200)
    args = models.JSONField(default=dict)
    queue = models.CharField(max_length=200, default=DEFAULT_QUEUE)
    priority = models.SmallIntegerField(default=DEFAULT_PRIORITY)
    max_attempts = models.SmallIntegerField(default=DEFAULT_MAX_ATTEMPTS)
    tags = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    missed_fire_policy = models.CharField(
        max_length=20,
        choices=[("coalesce", "coalesce"), ("catch_up", "catch_up")],
        default="coalesce",
    )
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=200, blank=True, default="")
    # When it was last resumed: fires due before then were due while it was paused, so they
    # count as missed and its missed-fire policy applies to them (decision 034).
    resumed_at = models.DateTimeField(null=True, blank=True)
    # The last scheduled fire enqueued (NULL: never fired; fires start after created_at).
    last_fire_at = models.DateTimeField(null=True, blank=True)
    # The job the last fire (or manual trigger) enqueued; not a foreign key, since
    # terminal jobs are pruned.
    last_job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "awa_cron_schedules"
        ordering = ["name"]
        permissions = [("manage_schedule", "Can pause, resume, trigger and remove schedules")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(missed_fire_policy__in=["coalesce", "catch_up"]),
                name="awa_cron_policy_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.expression} {self.timezone})"


class DeadLetter(models.Model):
    """A job of a dead-letter queue that failed for good, moved out of `awa_jobs_hot` with
    its history and the reason (docs/dead-letters.md, decision 016). `id` is the job's id:
    a retry puts the job back under the same id, attempts reset, errors and run_lease kept."""

    id = models.BigIntegerField(primary_key=True)
    kind = models.CharField(max_length=200)
    queue = models.CharField(max_length=200)
    args = models.JSONField(default=dict)
    priority = models.SmallIntegerField(default=DEFAULT_PRIORITY)
    attempt = models.SmallIntegerField(default=0)
    max_attempts = models.SmallIntegerField(default=DEFAULT_MAX_ATTEMPTS)
    # Kept (never reset) so an attempt of the job's earlier life can never pass the guard
    # of an attempt after a retry (decision 016).
    run_lease = models.BigIntegerField(default=0)
    created_at = models.DateTimeField()
    attempted_at = models.DateTimeField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    tags = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    progress = models.JSONField(null=True, blank=True)
    attempted_by = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    django_task = models.JSONField(null=True, blank=True)
    unique_key = models.BinaryField(null=True, blank=True)
    unique_states = models.CharField(max_length=8, null=True, blank=True)
    reason = models.CharField(max_length=40, choices=DeadLetterReason.choices)
    dead_lettered_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "awa_dead_letters"
        ordering = ["-dead_lettered_at", "-id"]
        # One permission per operator action, as on Job.
        permissions = [
            ("retry_dead_letter", "Can retry dead letters"),
            ("purge_dead_letter", "Can purge dead letters"),
        ]
        indexes = [
            # The listing's keyset order, and retention pruning's range.
            models.Index(fields=["dead_lettered_at", "id"], name="awa_dead_letters_at_idx"),
            # Filtered listings and the per-queue depth.
            models.Index(fields=["queue", "dead_lettered_at"], name="awa_dead_letters_queue_idx"),
            models.Index(fields=["kind", "dead_lettered_at"], name="awa_dead_letters_kind_idx"),
            GinIndex(fields=["tags"], name="awa_dead_letters_tags_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.id} (dead letter: {self.reason})"


class BulkOperation(models.Model):
    """One bulk operation (`Client.bulk_*`): its filter, action and keyset cursor, advanced
    in the transaction of each chunk, so a stopped operation resumes after the last job id
    it looked at. Finished ones are kept for inspection and pruned after FAILED_RETENTION."""

    id = models.BigAutoField(primary_key=True)
    action = models.CharField(max_length=20)
    filter = models.JSONField(default=dict)
    priority = models.SmallIntegerField(null=True, blank=True)
    target_queue = models.CharField(max_length=200, null=True, blank=True)
    state = models.CharField(
        max_length=20, choices=[("running", "running"), ("completed", "completed")]
    )
    chunk_size = models.IntegerField()
    cursor = models.BigIntegerField(default=0)
    matched = models.BigIntegerField(default=0)
    done = models.BigIntegerField(default=0)
    skipped = models.BigIntegerField(default=0)
    conflicts = models.BigIntegerField(default=0)
    total_estimate = models.BigIntegerField(default=0)
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "awa_bulk_operations"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"bulk {self.action} #{self.id} ({self.state})"


class QueueRollup(models.Model):
    """One queue's figures for one minute, written by the maintenance leader from the jobs
    that finalized in that minute (worker/maintenance/rollup.py) and drawn by the admin
    dashboard. Pruned after `AWA["ROLLUP_RETENTION"]`. Decision 021."""

    queue = models.CharField(max_length=200)
    minute = models.DateTimeField()
    completed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    cancelled = models.IntegerField(default=0)
    # Retries of the jobs that finalized in this minute (their attempts before the last).
    retried = models.IntegerField(default=0)
    # Seconds, over the jobs that finalized in this minute: wait is created_at → the last
    # claim, run is the last claim → finalized_at. NULL when no job finalized.
    wait_p50 = models.FloatField(null=True)
    wait_p95 = models.FloatField(null=True)
    run_p50 = models.FloatField(null=True)
    run_p95 = models.FloatField(null=True)
    # Available jobs and the age of the oldest one when the minute was rolled up.
    depth = models.IntegerField(null=True)
    lag_seconds = models.FloatField(null=True)

    class Meta:
        db_table = "awa_queue_rollups"
        ordering = ["minute", "queue"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "minute"], name="awa_rollups_queue_minute")
        ]
        indexes = [models.Index(fields=["minute"], name="awa_rollups_minute_idx")]

    def __str__(self) -> str:
        return f"{self.queue} @ {self.minute:%Y-%m-%d %H:%M}"
