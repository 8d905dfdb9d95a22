"""Lease epochs (docs/decisions/029-claims-without-the-flush-wait.md): the one-row table
each runtime connection draws its epoch from when it opens. Claims on a connection with an
epoch hand out run_leases from `epoch * 2**24` up and commit without waiting for the WAL
flush; a claim lost in a crash can then never be handed out again under the same
run_lease. Jobs in flight keep their small run_leases: the first claim under an epoch
jumps above them, and the guard compares for equality only.

Run it before starting workers of this version: the claim reads the table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0010_index_diet")]

    operations = [
        migrations.CreateModel(
            name="LeaseEpoch",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("epoch", models.BigIntegerField(default=0)),
            ],
            options={"db_table": "awa_lease_epochs"},
        ),
        migrations.RunSQL(
            "INSERT INTO awa_lease_epochs (id, epoch) VALUES (1, 0) ON CONFLICT DO NOTHING",
            migrations.RunSQL.noop,
        ),
    ]
