"""Unique jobs (docs/decisions/012-unique-jobs.md): the IMMUTABLE function that says
whether a row's state is in its `unique_states`, the partial unique index over `unique_key`
that uses it, and the lookup index of `cancel_by_unique_key`.

Both indexes are built CONCURRENTLY (so the migration is not atomic): a plain CREATE INDEX
holds a SHARE lock for the whole build, which stops every enqueue, claim and completion on
a large queue table, an outage. A concurrent build that failed half-way leaves an INVALID
index behind; running the migration again drops it and builds it anew.
"""

from django.db import migrations, models

import awa_django.storage.models

STATE_IN_UNIQUE_STATES = """
CREATE OR REPLACE FUNCTION awa_state_in_unique_states(unique_states text, state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- Awa's bit(8) text: bit 0 (leftmost) scheduled ... bit 7 waiting_external. A job
    -- without a key (NULL unique_states) is never in the index: substr(NULL) is NULL.
    -- Not STRICT on purpose: PostgreSQL inlines only a non-strict SQL function whose body
    -- is not provably strict, and the index predicate is evaluated on every insert and on
    -- every claim and completion of every job. Called, it cost the sync drain ~8 %.
    SELECT substr(unique_states, CASE state
        WHEN 'scheduled' THEN 1 WHEN 'available' THEN 2 WHEN 'running' THEN 3
        WHEN 'completed' THEN 4 WHEN 'retryable' THEN 5 WHEN 'failed' THEN 6
        WHEN 'cancelled' THEN 7 WHEN 'waiting_external' THEN 8 END, 1) = '1'
$$
"""

# (name, definition): as Django would write them for the model's Meta, built concurrently.
INDEXES = [
    (
        "awa_jobs_unique_idx",
        "CREATE UNIQUE INDEX CONCURRENTLY awa_jobs_unique_idx ON awa_jobs_hot (unique_key) "
        "WHERE awa_state_in_unique_states(unique_states, state)",
    ),
    (
        "awa_jobs_unique_key_idx",
        "CREATE INDEX CONCURRENTLY awa_jobs_unique_key_idx ON awa_jobs_hot (unique_key) "
        "WHERE unique_key IS NOT NULL",
    ),
]


def build_indexes(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for name, create in INDEXES:
            cursor.execute(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
                [name],
            )
            found = cursor.fetchone()
            if found is not None and found[0]:
                continue  # built by an earlier run
            if found is not None:  # INVALID: a concurrent build failed half-way
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            cursor.execute(create)


def drop_indexes(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for name, _ in INDEXES:
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("awa_django", "0004_cron_schedules"),
    ]

    operations = [
        migrations.RunSQL(
            STATE_IN_UNIQUE_STATES,
            reverse_sql="DROP FUNCTION IF EXISTS awa_state_in_unique_states(text, text)",
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(build_indexes, drop_indexes)],
            state_operations=[
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("unique_key__isnull", False)),
                        fields=["unique_key"],
                        name="awa_jobs_unique_key_idx",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(
                            awa_django.storage.models.StateInUniqueStates("unique_states", "state")
                        ),
                        fields=("unique_key",),
                        name="awa_jobs_unique_idx",
                    ),
                ),
            ],
        ),
    ]
