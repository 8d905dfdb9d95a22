"""The workflow trigger functions plan their statements once per session (decision 043,
"Cost"): `plan_cache_mode = force_generic_plan` on awa_workflow_parent_ended and
awa_workflow_settle (migration 0013, settle as 0015 left it).

Why: PL/pgSQL caches each statement's plan, and after five calls keeps a generic plan only
when its estimated cost is no worse than the custom plans'. These statements take an array
(`= ANY($1)`): the generic estimate assumes several elements, the custom plan for a chain's
single child is cheaper on paper, so PostgreSQL re-planned every statement on every
parent, forever. Planning was most of a chain parent's trigger cost (backend CPU per
completed parent 1.0-1.2 ms before, 0.4-0.5 ms after, same sitting). The generic plans are
the ones the custom plans were: index probes on each table's key (awa_job_waits by
job_id, awa_jobs_hot by id with the state filter, awa_job_dependencies by parent_id,
awa_batch_members by job_id), whose cost grows with the array and never becomes a scan.

Behaviour is unchanged: the bodies, lock order and statements are 0013's and 0015's; only
how they are planned differs. The setting holds while each function runs (PostgreSQL
restores it on exit), so it also covers the statements of the cascade's triggers it fires.
Safe with jobs in flight (ALTER FUNCTION; a call already running keeps its setting).
Reversible: RESET restores planning by the session's setting. A later CREATE OR REPLACE of
either function must repeat the SET clause, or it drops it.
"""

from django.db import migrations

FUNCTIONS = (
    "awa_workflow_parent_ended(bigint, text)",
    "awa_workflow_settle(bigint[])",
)


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0015_event_outbox")]

    operations = [
        migrations.RunSQL(
            [f"ALTER FUNCTION {f} SET plan_cache_mode = force_generic_plan" for f in FUNCTIONS],
            reverse_sql=[f"ALTER FUNCTION {f} RESET plan_cache_mode" for f in FUNCTIONS],
        ),
    ]
