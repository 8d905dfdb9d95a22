"""When a cron schedule was last resumed (docs/decisions/034-cron-fires-each-time-once.md):
fires due before it count as missed, so a short pause coalesces like a long one. A
nullable column without a default: adding it rewrites nothing, and a schedule never
resumed (NULL) is judged by the age of its fires alone, as before.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0011_lease_epochs")]

    operations = [
        migrations.AddField(
            model_name="cronschedule",
            name="resumed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
