"""The index diet (docs/decisions/028-index-diet.md): the queue, state and tags lookup
indexes of `awa_jobs_hot` become partial, so that a job's three writes (enqueue, claim,
completion) add 11 index entries instead of 17.

Every index is built and dropped CONCURRENTLY, so the migration is not atomic: a plain
CREATE INDEX holds a SHARE lock on the jobs table for the whole build (no enqueue, claim or
completion meanwhile) and a plain DROP INDEX an ACCESS EXCLUSIVE one. The new indexes are
built before the old ones are dropped, so no query is ever left without an index.

A concurrent build that fails half-way (cancelled, a deadlock, the server restarted) leaves
an INVALID index behind, and an interrupted run leaves the steps it finished applied while
Django records nothing. Running `migrate` again finishes the work: a build keeps a valid
index of its name and drops an invalid one before building it anew; the drops are
`IF EXISTS`.
"""

from typing import Any

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


def index_validity(connection: Any, name: str) -> bool | None:
    """Whether index `name` exists in the current schema and is valid (None: absent)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
            [name],
        )
        found = cursor.fetchone()
    return None if found is None else bool(found[0])


class AddIndexConcurrentlyOnce(AddIndexConcurrently):
    """AddIndexConcurrently that a second run after an interruption can complete."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        self._ensure_not_in_transaction(schema_editor)
        valid = index_validity(schema_editor.connection, self.index.name)
        if valid:
            return  # built by an earlier, interrupted run
        if valid is False:  # what a failed concurrent build leaves behind
            with schema_editor.connection.cursor() as cursor:
                cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{self.index.name}"')
        super().database_forwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("awa_django", "0009_queue_rollups"),
    ]

    operations = [
        AddIndexConcurrentlyOnce(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "available"), _negated=True),
                fields=["queue", "state"],
                name="awa_jobs_queue_state_part_idx",
            ),
        ),
        AddIndexConcurrentlyOnce(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state__in", ["available", "completed"]), _negated=True),
                fields=["state", "id"],
                include=("queue",),
                name="awa_jobs_state_id_part_idx",
            ),
        ),
        AddIndexConcurrentlyOnce(
            model_name="job",
            index=django.contrib.postgres.indexes.GinIndex(
                condition=models.Q(("tags", []), _negated=True),
                fields=["tags"],
                name="awa_jobs_tags_part_idx",
            ),
        ),
        RemoveIndexConcurrently(model_name="job", name="awa_jobs_queue_state_idx"),
        RemoveIndexConcurrently(model_name="job", name="awa_jobs_state_id_idx"),
        RemoveIndexConcurrently(model_name="job", name="awa_jobs_tags_idx"),
    ]
