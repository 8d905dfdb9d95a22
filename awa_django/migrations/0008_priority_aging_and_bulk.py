"""Priority aging's `original_priority` column and the bulk operations' table (decision 018).

Safe with jobs in flight: a nullable column without a default is a catalog-only change
(no table rewrite, the ACCESS EXCLUSIVE lock is held for milliseconds), and old workers
never read or write it; the new table is used only by the new Client.
"""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("awa_django", "0007_flow_control"),
    ]

    operations = [
        migrations.CreateModel(
            name="BulkOperation",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("action", models.CharField(max_length=20)),
                ("filter", models.JSONField(default=dict)),
                ("priority", models.SmallIntegerField(blank=True, null=True)),
                ("target_queue", models.CharField(blank=True, max_length=200, null=True)),
                (
                    "state",
                    models.CharField(
                        choices=[("running", "running"), ("completed", "completed")], max_length=20
                    ),
                ),
                ("chunk_size", models.IntegerField()),
                ("cursor", models.BigIntegerField(default=0)),
                ("matched", models.BigIntegerField(default=0)),
                ("done", models.BigIntegerField(default=0)),
                ("skipped", models.BigIntegerField(default=0)),
                ("conflicts", models.BigIntegerField(default=0)),
                ("total_estimate", models.BigIntegerField(default=0)),
                ("created_by", models.CharField(blank=True, default="", max_length=200)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "updated_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "db_table": "awa_bulk_operations",
                "ordering": ["-id"],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="original_priority",
            field=models.SmallIntegerField(blank=True, null=True),
        ),
    ]
