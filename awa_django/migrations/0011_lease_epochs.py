"""Lease epochs (docs/decisions/029-claims-without-the-flush-wait.md): the sequence each
runtime connection draws its epoch from when it opens. Claims on a connection with an
epoch hand out run_leases of at least `epoch << 32` and commit without waiting for the WAL
flush; a claim lost in a crash can then never be handed out again under the same
run_lease. Jobs in flight keep their small run_leases: the first claim under an epoch
jumps above them, and the guard compares for equality only.

A sequence, not a table: nothing but the claim's connections use it, and TRUNCATE of the
awa tables (tests, a reset) must never restart it. Unapplying keeps it for the same reason:
a sequence dropped and created again would hand out old epochs a second time.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0010_index_diet")]

    operations = [
        migrations.RunSQL(
            "CREATE SEQUENCE IF NOT EXISTS awa_lease_epochs AS bigint MINVALUE 1 MAXVALUE 2147483647",
            migrations.RunSQL.noop,
        ),
    ]
