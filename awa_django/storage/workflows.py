"""The workflow tables (decision 043): dependency edges, each waiting child's counters, and
batches with their members. Kept apart from `awa_jobs_hot` so a job outside any workflow
carries nothing but two booleans; the triggers of migration 0013 keep these rows in step
with every transition of a parent, in that transition's transaction."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from awa_django.states import ParentFailurePolicy


class JobDependency(models.Model):
    """One edge: `child_id` waits on `parent_id`. `parent_state` is how the parent ended
    (completed, failed, cancelled; dead-lettered counts as failed), NULL while it has not:
    the trigger resolves an edge once and unresolves it when the parent is retried. No
    foreign keys: a dead-lettered parent leaves `awa_jobs_hot` and its edges must stay (a
    dead-letter retry restores them), and a foreign key would cost every deletion of every
    job a lookup here."""

    pk = models.CompositePrimaryKey("parent_id", "child_id")
    parent_id = models.BigIntegerField()
    child_id = models.BigIntegerField()
    parent_state = models.CharField(max_length=20, null=True, blank=True)

    class Meta:
        db_table = "awa_job_dependencies"
        indexes = [models.Index(fields=["child_id"], name="awa_job_deps_child_idx")]


class JobWait(models.Model):
    """A child's counters: parents not yet ended, parents that failed (failed, cancelled or
    dead-lettered), and its policy. The row lock of `pending_parents - 1` serialises
    sibling parents that end at once, so exactly one of them sees zero."""

    job_id = models.BigIntegerField(primary_key=True)
    pending_parents = models.IntegerField()
    failed_parents = models.IntegerField(default=0)
    on_parent_failure = models.CharField(
        max_length=10, choices=[(p.value, p.value) for p in ParentFailurePolicy]
    )
    # True while the child is cancelled because of a failed parent (policy `cancel`): a
    # retry of the last failed parent puts it back to waiting. An operator's cancel
    # (cascade included) leaves it false.
    cancelled_by_parents = models.BooleanField(default=False)

    class Meta:
        db_table = "awa_job_waits"


class Batch(models.Model):
    """A batch: its members' terminal outcomes counted by the trigger, and the callback
    jobs (children of every member) it enqueued."""

    id = models.BigAutoField(primary_key=True)
    total = models.IntegerField()
    completed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)  # failed for good or dead-lettered
    cancelled = models.IntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    # When the last member ended (NULL while one has not; cleared if one is retried).
    finished_at = models.DateTimeField(null=True, blank=True)
    on_success_id = models.BigIntegerField(null=True, blank=True)
    on_complete_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "awa_batches"
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return f"batch {self.pk}"


class BatchMember(models.Model):
    """A job's membership of a batch (one batch per job), with the outcome the batch
    counted for it (NULL: not ended)."""

    job_id = models.BigIntegerField(primary_key=True)
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, db_constraint=True)
    outcome = models.CharField(max_length=20, null=True, blank=True)

    class Meta:
        db_table = "awa_batch_members"


class EventAnnouncement(models.Model):
    """An event a trigger-made transition owes (decision 046): the fan-in trigger writes
    one row per child it cancels, in the parent's transaction; the leader's announcer (or
    the inline runner) deletes it, with its follow-ups, in one transaction, then dispatches
    the event. A row commits iff the transition it announces does."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField()
    event = models.CharField(max_length=20)  # "cancelled", the one event owed so far
    reason = models.TextField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "awa_event_outbox"
