"""Trigger-made cancels announce `Cancelled` (decision 046): the outbox table
`awa_event_outbox`, and `awa_workflow_settle` (migration 0013) replaced by a version that
writes one outbox row per child it cancels, in the parent's transaction.

Safe with jobs in flight: a new, empty table, and CREATE OR REPLACE of one function (the
trigger keeps calling it by name; a transaction already inside the old body finishes with
it). Children cancelled before this migration announced nothing and are not announced
now. Reversible: the reverse puts 0013's body back, then drops the table (rows not yet
announced are lost with it).
"""

import django.db.models.functions.datetime
from django.db import migrations, models

# The queue's NOTIFY channel, as 0013 froze it.
CHANNEL = (
    "CASE WHEN octet_length('awa:' || p.queue) <= 63 THEN 'awa:' || p.queue "
    "ELSE 'awa:' || md5(p.queue) END"
)
# Matches the error entry the cancel writes; the event's `reason`.
REASON = "cancelled: a parent failed"


def settle(announce: str) -> str:
    """awa_workflow_settle as 0013 wrote it, with `announce` run on the cancelled ids."""
    return f"""
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
                'error', '{REASON}', 'attempt', j.attempt, 'at', now()))
        FROM awa_job_waits w
        WHERE w.job_id = ANY(p_children) AND j.id = w.job_id AND j.state = 'waiting_parents'
          AND w.failed_parents > 0 AND w.on_parent_failure = 'cancel'
        RETURNING j.id
    ){announce}
    SELECT array_agg(id) INTO v_cancelled FROM moved;
    IF v_cancelled IS NOT NULL THEN
        UPDATE awa_job_waits SET cancelled_by_parents = true WHERE job_id = ANY(v_cancelled);
    END IF;

    WITH promoted AS (
        UPDATE awa_jobs_hot j
        -- statement_timestamp(), not now(): a row inserted earlier in this transaction
        -- by a statement whose run_at default is its statement's time (Now()) is due.
        SET state = CASE WHEN j.run_at > statement_timestamp() THEN 'scheduled'
                         ELSE 'available' END,
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
"""


# One row per cancelled child, written in the cancel's own statement: the children's
# triggers (the cascade's next level) run when that statement ends, so a cascade's rows
# follow its levels and the announcer emits a parent's Cancelled before its children's.
# The job's row is not copied: the announcer reads it when it claims the row.
ANNOUNCE = f""", announced AS (
        INSERT INTO awa_event_outbox (job_id, event, reason)
        SELECT id, 'cancelled', '{REASON}' FROM moved ORDER BY id
    )"""


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0014_concurrency_keys")]

    operations = [
        migrations.CreateModel(
            name="EventAnnouncement",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job_id", models.BigIntegerField()),
                ("event", models.CharField(max_length=20)),
                ("reason", models.TextField()),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
            options={"db_table": "awa_event_outbox"},
        ),
        migrations.RunSQL(settle(ANNOUNCE), reverse_sql=settle("")),
    ]
