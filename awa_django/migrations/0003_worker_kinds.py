"""Worker rows say which kinds each process handles (kinds no live worker handles show on
the dashboard and in awa_status) and how many hook events it dropped. Columns carry
database defaults, so workers of the previous release keep registering during the deploy."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("awa_django", "0002_internal_columns"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerinstance",
            name="hooks_dropped",
            field=models.BigIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="workerinstance",
            name="kinds",
            field=models.JSONField(db_default=[], default=list),
        ),
        migrations.AddField(
            model_name="workerinstance",
            name="serves_tasks",
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
