"""Internal data leaves users' `metadata`: the resume payload and the django.tasks marker
get columns of their own. Safe with jobs in flight: the columns are added nullable (no
table rewrite), then rows that carry the old keys have them moved, in one statement each.
A worker of the previous release still running during the upgrade reads the payload from
metadata, so stop old workers before migrating (docs/worker.md, upgrading)."""

from django.db import migrations, models

MOVE_CALLBACK_RESULT = """
UPDATE awa_jobs_hot
SET callback_result = metadata -> '_awa_callback_result',
    metadata = metadata - '_awa_callback_result'
WHERE metadata ? '_awa_callback_result'
"""

MOVE_TASK_MARKER = """
UPDATE awa_jobs_hot
SET django_task = metadata -> 'django_task', metadata = metadata - 'django_task'
WHERE metadata ? 'django_task' AND jsonb_typeof(metadata -> 'django_task') = 'object'
"""

RESTORE = """
UPDATE awa_jobs_hot
SET metadata = metadata
    || CASE WHEN callback_result IS NULL THEN '{}'::jsonb
            ELSE jsonb_build_object('_awa_callback_result', callback_result) END
    || CASE WHEN django_task IS NULL THEN '{}'::jsonb
            ELSE jsonb_build_object('django_task', django_task) END
WHERE callback_result IS NOT NULL OR django_task IS NOT NULL
"""


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="callback_result",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="django_task",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunSQL(MOVE_CALLBACK_RESULT, reverse_sql=RESTORE),
        migrations.RunSQL(MOVE_TASK_MARKER, reverse_sql=migrations.RunSQL.noop),
    ]
