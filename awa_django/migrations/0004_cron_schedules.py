"""Cron schedules (issue 9): one row per declared `periodic(...)` schedule, synced by the
maintenance leader; `last_fire_at` is the compare-and-swap field of every fire."""

import django.contrib.postgres.fields
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("awa_django", "0003_worker_kinds"),
    ]

    operations = [
        migrations.CreateModel(
            name="CronSchedule",
            fields=[
                ("name", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("expression", models.CharField(max_length=200)),
                ("timezone", models.CharField(default="UTC", max_length=100)),
                ("kind", models.CharField(max_length=200)),
                ("args", models.JSONField(default=dict)),
                ("queue", models.CharField(default="default", max_length=200)),
                ("priority", models.SmallIntegerField(default=2)),
                ("max_attempts", models.SmallIntegerField(default=25)),
                (
                    "tags",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=200), blank=True, default=list
                    ),
                ),
                ("metadata", models.JSONField(blank=True, default=dict)),
                (
                    "missed_fire_policy",
                    models.CharField(
                        choices=[("coalesce", "coalesce"), ("catch_up", "catch_up")],
                        default="coalesce",
                        max_length=20,
                    ),
                ),
                ("paused", models.BooleanField(default=False)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("paused_by", models.CharField(blank=True, default="", max_length=200)),
                ("last_fire_at", models.DateTimeField(blank=True, null=True)),
                ("last_job_id", models.BigIntegerField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "updated_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
            options={
                "db_table": "awa_cron_schedules",
                "ordering": ["name"],
                "permissions": [
                    ("manage_schedule", "Can pause, resume, trigger and remove schedules")
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("missed_fire_policy__in", ["coalesce", "catch_up"])),
                        name="awa_cron_policy_valid",
                    )
                ],
            },
        ),
    ]
