"""The workflow functions reach jobs by primary key whatever the statistics say (decision
043, "Cost"; issue 29): enqueueing dependent jobs was quadratic on fresh tables.

`awa_workflow_settle` (0015's body, planned generically since 0016) joined
`awa_job_waits` to `awa_jobs_hot` on the id with `state = 'waiting_parents'`. Its generic
plan is made once per session, from the statistics of that moment; on a freshly
truncated table they say the table is empty, the state index then looks like the
cheapest way in (one row expected), and the plan read every `waiting_parents` row of the
table for each child it settled, for the rest of the session. Chains of three enqueued
in one transaction on a new database went from 13 ms to 130-145 ms per chain by the
2,000th (the link settles each new child, and every child of the transaction waits).
Statistics of an emptied table that was analyzed are worse: every plan is a sequential
scan.

Now each of settle's statements reads the children's counter rows by `awa_job_waits`'
primary key into an array (an InitPlan, not a join), and moves the jobs whose id is in
that array by `awa_jobs_hot`'s primary key; the state test is written so that no index
serves it (`|| ''`, as in the completion, decision 027), so the state index is no path.
Each statement reads one table at a time by `= ANY(...)` on its key, and no join is left
for a merge to want a full index scan. Settle, awa_workflow_parent_ended and
awa_workflow_link run with `enable_seqscan = off`: the one plan left for each statement
is then the primary key's, even when the table is empty on paper (a sequential scan of
an empty table is what the planner otherwise prefers, and a generic plan keeps it while
the table grows). Each statement still reads its rows afresh, in 0015's order, under the
locks the callers hold; what it does is unchanged.

Safe with jobs in flight: CREATE OR REPLACE of settle (same name and signature, 0016's
`plan_cache_mode` repeated in its SET clauses, or it would be dropped) and ALTER
FUNCTION of the other two; a call already running finishes with the old body.
Reversible: the reverse puts 0015's body back with 0016's setting and resets the others.
"""

import importlib

from django.db import migrations

_0015 = importlib.import_module("awa_django.migrations.0015_event_outbox")

# The queue's NOTIFY channel, the cancel's error entry and its outbox row, as 0015 wrote
# them: only the statements' ways in to the rows change here.
CHANNEL, REASON, ANNOUNCE = _0015.CHANNEL, _0015.REASON, _0015.ANNOUNCE


def waiting(test: str) -> str:
    """The ids among p_children whose counters pass `test`, read by awa_job_waits_pkey:
    an InitPlan, evaluated once before the statement reads awa_jobs_hot, not a join."""
    return (
        f"ARRAY(SELECT w.job_id FROM awa_job_waits w WHERE w.job_id = ANY(p_children) AND {test})"
    )


DISCARDED = waiting("w.failed_parents > 0 AND w.on_parent_failure = 'discard'")
CANCELLED = waiting("w.failed_parents > 0 AND w.on_parent_failure = 'cancel'")
DUE = waiting("w.pending_parents = 0 AND (w.failed_parents = 0 OR w.on_parent_failure = 'run')")
# `|| ''`: the state index (which the planner prefers when the statistics say the table
# holds no row) is no path; the id array is the only one.
UNINDEXED_WAITING = "j.state || '' = 'waiting_parents'"
SETTINGS = "SET plan_cache_mode = force_generic_plan SET enable_seqscan = off"

SETTLE = f"""
CREATE OR REPLACE FUNCTION awa_workflow_settle(p_children bigint[]) RETURNS void
LANGUAGE plpgsql {SETTINGS} AS $$
DECLARE
    v_cancelled bigint[];
    v_woken bigint;
BEGIN
    DELETE FROM awa_jobs_hot j
    WHERE j.id = ANY({DISCARDED}) AND {UNINDEXED_WAITING};

    WITH moved AS (
        UPDATE awa_jobs_hot j
        SET state = 'cancelled', finalized_at = now(),
            errors = j.errors || jsonb_build_array(jsonb_build_object(
                'error', '{REASON}', 'attempt', j.attempt, 'at', now()))
        WHERE j.id = ANY({CANCELLED}) AND {UNINDEXED_WAITING}
        RETURNING j.id
    ){ANNOUNCE}
    SELECT array_agg(id) INTO v_cancelled FROM moved;
    IF v_cancelled IS NOT NULL THEN
        UPDATE awa_job_waits SET cancelled_by_parents = true WHERE job_id = ANY(v_cancelled);
    END IF;

    WITH promoted AS (
        UPDATE awa_jobs_hot j
        -- statement_timestamp(), not now(): a row inserted earlier in this transaction
        -- by a statement whose run_at default is its statement's time (Now()) is due.
        SET state = CASE WHEN j.run_at > statement_timestamp() THEN 'scheduled'
                         ELSE 'available' END,
            run_at = greatest(j.run_at, now())
        WHERE j.id = ANY({DUE}) AND {UNINDEXED_WAITING}
        RETURNING j.queue, j.state
    )
    SELECT count(pg_notify({CHANNEL}, '')) INTO v_woken
    FROM (SELECT DISTINCT queue FROM promoted WHERE state = 'available') p;
END
$$;
"""

# Their statements read by key already (edges by parent_id, counters by job_id, the
# link's child by id); without sequential scans no empty-looking table can turn them
# into scans either.
OTHERS = (
    "awa_workflow_parent_ended(bigint, text)",
    "awa_workflow_link(bigint, bigint[], text[], text)",
)

FORWARD = [SETTLE, *(f"ALTER FUNCTION {f} SET enable_seqscan = off" for f in OTHERS)]
BACKWARD = [
    *(f"ALTER FUNCTION {f} RESET enable_seqscan" for f in OTHERS),
    _0015.settle(_0015.ANNOUNCE),
    "ALTER FUNCTION awa_workflow_settle(bigint[]) SET plan_cache_mode = force_generic_plan",
]


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0017_key_direct_hand_off")]

    operations = [migrations.RunSQL(FORWARD, reverse_sql=BACKWARD)]
