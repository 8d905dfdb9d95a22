"""A released slot goes straight to its key's next waiting job (decision 045, "Cost").

0014's release freed the slot row, then moved the key's next waiting job to `available`,
which ran full admission for it (the lowered-max check, a search for a free slot locked
SKIP LOCKED, the rate lookup, a second write of a slot row): two writes of the slot row
and two more trigger function calls per job of a busy key. When admission would give the
job a slot anyway (the freed slot is below the job's max, no slot at or above that max
is held, and the job's kind and key have no rate limit), the release now writes the next
job's id into the slot it holds the lock of, and sets the job's `key_slot` with its
state, so the admission trigger (WHEN key_slot IS NULL) does not run. Otherwise the
release does as 0014 did, on the waiting job it already locked.

Exact as before: the slot row changes owner in one UPDATE under its row lock, guarded by
the releasing job's id; a slot below the max holds one job id at a time.

Safe with jobs in flight: CREATE OR REPLACE of one trigger function, same name and
signature. Reversible: the reverse puts 0014's body back.
"""

import importlib

from django.db import migrations

from awa_django.channels import channel_sql

_0014 = importlib.import_module("awa_django.migrations.0014_concurrency_keys")

# The queue's NOTIFY channel, spelled as 0014 spells it.
CHANNEL = channel_sql("next_queue")

RELEASE = f"""
CREATE OR REPLACE FUNCTION awa_key_release() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    next record;
    next_queue text;
    next_state text;
    max_in_flight int;
BEGIN
    -- The key's next waiting job (dispatch order; one another transaction is moving is
    -- left to it), locked: both branches below move it.
    SELECT w.id, w.kind, w.metadata -> '_awa_concurrency' AS spec INTO next
    FROM awa_jobs_hot w
    WHERE w.concurrency_key = OLD.concurrency_key AND w.state = 'waiting_slot'
    ORDER BY w.priority, w.run_at, w.id LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        UPDATE awa_key_slots SET job_id = NULL
        WHERE key_digest = OLD.concurrency_key AND slot = OLD.key_slot AND job_id = OLD.id;
        RETURN NULL;
    END IF;
    max_in_flight := awa_key_max(next.kind, next.spec);
    -- Direct hand-off: only where admission (awa_key_admit) would admit it with no token.
    IF OLD.key_slot < max_in_flight
       AND jsonb_typeof(next.spec -> 'rate') IS DISTINCT FROM 'number'
       AND NOT EXISTS (SELECT 1 FROM awa_key_limits l
                       WHERE l.kind = next.kind AND l.rate IS NOT NULL)
       AND NOT EXISTS (SELECT 1 FROM awa_key_slots s
                       WHERE s.key_digest = OLD.concurrency_key AND s.slot >= max_in_flight
                         AND s.job_id IS NOT NULL) THEN
        UPDATE awa_key_slots SET job_id = next.id
        WHERE key_digest = OLD.concurrency_key AND slot = OLD.key_slot AND job_id = OLD.id;
        IF FOUND THEN
            UPDATE awa_jobs_hot SET state = 'available', key_slot = OLD.key_slot
            WHERE id = next.id
            RETURNING queue INTO next_queue;
            PERFORM pg_notify({CHANNEL}, '');
            RETURN NULL;
        END IF;
    END IF;
    -- Otherwise as 0014: free the slot, and the job goes through admission.
    UPDATE awa_key_slots SET job_id = NULL
    WHERE key_digest = OLD.concurrency_key AND slot = OLD.key_slot AND job_id = OLD.id;
    UPDATE awa_jobs_hot SET state = 'available' WHERE id = next.id
    RETURNING state, queue INTO next_state, next_queue;
    IF next_state = 'available' THEN
        PERFORM pg_notify({CHANNEL}, '');
    END IF;
    RETURN NULL;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0016_workflow_generic_plans")]

    operations = [migrations.RunSQL(RELEASE, reverse_sql=_0014.RELEASE)]
