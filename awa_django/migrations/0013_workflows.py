"""Workflows (docs/decisions/043-workflows.md): the `waiting_parents` state, two booleans on
`awa_jobs_hot` (both `db_default` false: adding them rewrites nothing and every existing
INSERT and the COPY path keep working), the dependency and batch tables, and the triggers
that move children and count batch members in the transaction of each parent's
transition, whichever statement made it.

The trigger functions are PL/pgSQL. Each statement inside takes a fresh snapshot (READ
COMMITTED), so it sees an edge that a concurrent enqueue committed while the parent's
transition waited for its row lock (enqueue holds the parent FOR SHARE, decision 043).
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

TERMINAL = "('completed', 'failed', 'cancelled')"
# The queue's NOTIFY channel, as awa_django.channels.channel_sql spells it (frozen here).
CHANNEL = (
    "CASE WHEN octet_length('awa:' || p.queue) <= 63 THEN 'awa:' || p.queue "
    "ELSE 'awa:' || md5(p.queue) END"
)

FUNCTIONS = f"""
-- Moves the waiting children among `p_children` on from their counters: a failed parent
-- and policy `discard` deletes the child, `cancel` cancels it (and marks it so a retry of
-- the parent restores it); no parent left and no failure (or policy `run`) makes it
-- available (scheduled while its own run_at is ahead) and wakes its queue. Only rows still
-- in `waiting_parents` move, so a settle is idempotent. A moved child that has children
-- of its own fires awa_workflow_parent_moved in turn (the cascade).
CREATE OR REPLACE FUNCTION awa_workflow_settle(p_children bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_cancelled bigint[];
    v_woken bigint;
BEGIN
    DELETE FROM awa_jobs_hot j USING awa_job_waits w
    WHERE w.job_id = ANY(p_children) AND j.id = w.job_id AND j.state = 'waiting_parents'
      AND w.failed_parents > 0 AND w.on_parent_failure = 'discard';

    WITH moved AS (
        UPDATE awa_jobs_hot j
        SET state = 'cancelled', finalized_at = now(),
            errors = j.errors || jsonb_build_array(jsonb_build_object(
                'error', 'cancelled: a parent failed', 'attempt', j.attempt, 'at', now()))
        FROM awa_job_waits w
        WHERE w.job_id = ANY(p_children) AND j.id = w.job_id AND j.state = 'waiting_parents'
          AND w.failed_parents > 0 AND w.on_parent_failure = 'cancel'
        RETURNING j.id
    )
    SELECT array_agg(id) INTO v_cancelled FROM moved;
    IF v_cancelled IS NOT NULL THEN
        UPDATE awa_job_waits SET cancelled_by_parents = true WHERE job_id = ANY(v_cancelled);
    END IF;

    WITH promoted AS (
        UPDATE awa_jobs_hot j
        SET state = CASE WHEN j.run_at > now() THEN 'scheduled' ELSE 'available' END,
            run_at = greatest(j.run_at, now())
        FROM awa_job_waits w
        WHERE w.job_id = ANY(p_children) AND j.id = w.job_id AND j.state = 'waiting_parents'
          AND w.pending_parents = 0
          AND (w.failed_parents = 0 OR w.on_parent_failure = 'run')
        RETURNING j.queue, j.state
    )
    SELECT count(pg_notify({CHANNEL}, '')) INTO v_woken
    FROM (SELECT DISTINCT queue FROM promoted WHERE state = 'available') p;
END
$$;

-- Parent `p_parent` ended `p_outcome` (completed, failed, cancelled): resolve its open
-- edges, count them on each child (rows locked in id order: siblings that end at once
-- never deadlock, and the row lock makes exactly one of them see zero), settle those
-- children, and count the outcome on its batch.
CREATE OR REPLACE FUNCTION awa_workflow_parent_ended(p_parent bigint, p_outcome text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_children bigint[];
    v_bad int := (p_outcome <> 'completed')::int;
BEGIN
    WITH resolved AS (
        UPDATE awa_job_dependencies SET parent_state = p_outcome
        WHERE parent_id = p_parent AND parent_state IS NULL
        RETURNING child_id
    )
    SELECT array_agg(child_id ORDER BY child_id) INTO v_children FROM resolved;
    IF v_children IS NOT NULL THEN
        PERFORM 1 FROM awa_job_waits WHERE job_id = ANY(v_children) ORDER BY job_id FOR UPDATE;
        UPDATE awa_job_waits
        SET pending_parents = pending_parents - 1, failed_parents = failed_parents + v_bad
        WHERE job_id = ANY(v_children);
        PERFORM awa_workflow_settle(v_children);
    END IF;

    WITH ended AS (
        UPDATE awa_batch_members SET outcome = p_outcome
        WHERE job_id = p_parent AND outcome IS NULL
        RETURNING batch_id
    )
    UPDATE awa_batches b
    SET completed = b.completed + (p_outcome = 'completed')::int,
        failed = b.failed + (p_outcome = 'failed')::int,
        cancelled = b.cancelled + (p_outcome = 'cancelled')::int,
        finished_at = CASE WHEN b.completed + b.failed + b.cancelled + 1 >= b.total
                           THEN now() END
    FROM ended e WHERE b.id = e.batch_id;
END
$$;

-- Parent `p_parent` left a terminal state (an operator's retry, a dead-letter retry):
-- its edges are open again, its children count it as pending, and a child that its
-- failure cancelled (policy `cancel`) waits again once no parent of it is failed.
CREATE OR REPLACE FUNCTION awa_workflow_parent_reopened(p_parent bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_children bigint[];
    v_bad int[];
BEGIN
    SELECT array_agg(child_id ORDER BY child_id),
           array_agg((parent_state <> 'completed')::int ORDER BY child_id)
    INTO v_children, v_bad
    FROM awa_job_dependencies WHERE parent_id = p_parent AND parent_state IS NOT NULL;
    IF v_children IS NOT NULL THEN
        UPDATE awa_job_dependencies SET parent_state = NULL
        WHERE parent_id = p_parent AND parent_state IS NOT NULL;
        PERFORM 1 FROM awa_job_waits WHERE job_id = ANY(v_children) ORDER BY job_id FOR UPDATE;
        UPDATE awa_job_waits w
        SET pending_parents = w.pending_parents + 1, failed_parents = w.failed_parents - x.bad
        FROM unnest(v_children, v_bad) AS x(id, bad) WHERE w.job_id = x.id;
        WITH revived AS (
            UPDATE awa_job_waits SET cancelled_by_parents = false
            WHERE job_id = ANY(v_children) AND cancelled_by_parents AND failed_parents = 0
            RETURNING job_id
        )
        UPDATE awa_jobs_hot j SET state = 'waiting_parents', finalized_at = NULL
        FROM revived r WHERE j.id = r.job_id AND j.state = 'cancelled';
    END IF;

    WITH reopened AS (
        SELECT batch_id, outcome FROM awa_batch_members
        WHERE job_id = p_parent AND outcome IS NOT NULL
    ), cleared AS (
        UPDATE awa_batch_members SET outcome = NULL
        WHERE job_id = p_parent AND outcome IS NOT NULL
    )
    UPDATE awa_batches b
    SET completed = b.completed - (r.outcome = 'completed')::int,
        failed = b.failed - (r.outcome = 'failed')::int,
        cancelled = b.cancelled - (r.outcome = 'cancelled')::int,
        finished_at = NULL
    FROM reopened r WHERE b.id = r.batch_id;
END
$$;

-- Enqueue's second half: child `p_child` (just inserted `waiting_parents`) waits on
-- `p_parents`, which the caller holds locked, each already ended as `p_ended` says (NULL:
-- not yet). A parent already ended counts at once: completed ones are done, failed ones
-- apply the policy now. The settle may promote, cancel or delete the child in this call.
CREATE OR REPLACE FUNCTION awa_workflow_link(
    p_child bigint, p_parents bigint[], p_ended text[], p_policy text
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO awa_job_dependencies (parent_id, child_id, parent_state)
    SELECT parent, p_child, ended FROM unnest(p_parents, p_ended) AS x(parent, ended);
    INSERT INTO awa_job_waits
        (job_id, pending_parents, failed_parents, on_parent_failure, cancelled_by_parents)
    SELECT p_child, count(*) FILTER (WHERE ended IS NULL),
           count(*) FILTER (WHERE ended <> 'completed'), p_policy, false
    FROM unnest(p_ended) AS ended;
    UPDATE awa_jobs_hot SET has_parents = true WHERE id = p_child;
    PERFORM awa_workflow_settle(ARRAY[p_child]);
END
$$;

CREATE OR REPLACE FUNCTION awa_workflow_parent_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state IN {TERMINAL} THEN
        PERFORM awa_workflow_parent_reopened(NEW.id);
    END IF;
    IF NEW.state IN {TERMINAL} THEN
        PERFORM awa_workflow_parent_ended(NEW.id, NEW.state);
    END IF;
    RETURN NULL;
END
$$;

-- A deleted job: a parent deleted before it ended was dead-lettered (its row is in
-- awa_dead_letters by now: the move's INSERT is in the same statement, whose AFTER
-- triggers run once it is done) and counts as failed, or was deleted otherwise and
-- counts as cancelled. A child's dependency rows go with it unless it was dead-lettered
-- (a dead-letter retry brings it back with them); a member's membership likewise.
CREATE OR REPLACE FUNCTION awa_workflow_job_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_dead boolean := EXISTS (SELECT 1 FROM awa_dead_letters WHERE id = OLD.id);
BEGIN
    IF OLD.has_dependents AND OLD.state NOT IN {TERMINAL} THEN
        PERFORM awa_workflow_parent_ended(
            OLD.id, CASE WHEN v_dead THEN 'failed' ELSE 'cancelled' END);
    END IF;
    IF NOT v_dead THEN
        IF OLD.has_parents THEN
            DELETE FROM awa_job_dependencies WHERE child_id = OLD.id;
            DELETE FROM awa_job_waits WHERE job_id = OLD.id;
        END IF;
        IF OLD.has_dependents THEN
            DELETE FROM awa_batch_members WHERE job_id = OLD.id;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN clauses are all a job outside any workflow meets: a boolean column test, no
-- function call, no event queued.
CREATE TRIGGER awa_workflow_parent_moved
AFTER UPDATE OF state ON awa_jobs_hot FOR EACH ROW
WHEN (NEW.has_dependents AND OLD.state IS DISTINCT FROM NEW.state
      AND (OLD.state IN {TERMINAL} OR NEW.state IN {TERMINAL}))
EXECUTE FUNCTION awa_workflow_parent_moved();

CREATE TRIGGER awa_workflow_job_deleted
AFTER DELETE ON awa_jobs_hot FOR EACH ROW
WHEN (OLD.has_dependents OR OLD.has_parents)
EXECUTE FUNCTION awa_workflow_job_deleted();
"""

DROP_FUNCTIONS = """
DROP TRIGGER IF EXISTS awa_workflow_job_deleted ON awa_jobs_hot;
DROP TRIGGER IF EXISTS awa_workflow_parent_moved ON awa_jobs_hot;
DROP FUNCTION IF EXISTS awa_workflow_job_deleted();
DROP FUNCTION IF EXISTS awa_workflow_parent_moved();
DROP FUNCTION IF EXISTS awa_workflow_link(bigint, bigint[], text[], text);
DROP FUNCTION IF EXISTS awa_workflow_parent_reopened(bigint);
DROP FUNCTION IF EXISTS awa_workflow_parent_ended(bigint, text);
DROP FUNCTION IF EXISTS awa_workflow_settle(bigint[]);
"""


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0012_cron_resumed_at")]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("total", models.IntegerField()),
                ("completed", models.IntegerField(default=0)),
                ("failed", models.IntegerField(default=0)),
                ("cancelled", models.IntegerField(default=0)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("on_success_id", models.BigIntegerField(blank=True, null=True)),
                ("on_complete_id", models.BigIntegerField(blank=True, null=True)),
            ],
            options={"db_table": "awa_batches"},
        ),
        migrations.CreateModel(
            name="JobWait",
            fields=[
                ("job_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("pending_parents", models.IntegerField()),
                ("failed_parents", models.IntegerField(default=0)),
                (
                    "on_parent_failure",
                    models.CharField(
                        choices=[("cancel", "cancel"), ("run", "run"), ("discard", "discard")],
                        max_length=10,
                    ),
                ),
                ("cancelled_by_parents", models.BooleanField(default=False)),
            ],
            options={"db_table": "awa_job_waits"},
        ),
        migrations.AddField(
            model_name="job",
            name="has_dependents",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddField(
            model_name="job",
            name="has_parents",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AlterField(
            model_name="job",
            name="state",
            field=models.CharField(
                choices=[
                    ("scheduled", "Scheduled"),
                    ("waiting_parents", "Waiting Parents"),
                    ("available", "Available"),
                    ("running", "Running"),
                    ("waiting_external", "Waiting External"),
                    ("retryable", "Retryable"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="available",
                max_length=20,
            ),
        ),
        migrations.CreateModel(
            name="BatchMember",
            fields=[
                ("job_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("outcome", models.CharField(blank=True, max_length=20, null=True)),
                (
                    "batch",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, to="awa_django.batch"
                    ),
                ),
            ],
            options={"db_table": "awa_batch_members"},
        ),
        migrations.CreateModel(
            name="JobDependency",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "parent_id",
                        "child_id",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("parent_id", models.BigIntegerField()),
                ("child_id", models.BigIntegerField()),
                ("parent_state", models.CharField(blank=True, max_length=20, null=True)),
            ],
            options={
                "db_table": "awa_job_dependencies",
                "indexes": [models.Index(fields=["child_id"], name="awa_job_deps_child_idx")],
            },
        ),
        migrations.RunSQL(FUNCTIONS, reverse_sql=DROP_FUNCTIONS),
    ]
