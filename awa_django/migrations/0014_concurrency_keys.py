"""Per-key concurrency and rate limits (docs/flow-control.md, decision 045).

Jobs get `concurrency_key` (a 16-byte digest, set by the insert trigger from the key the
enqueue wrote in metadata["_awa_concurrency"]) and `key_slot` (the slot held while
admitted); keys get their slot rows, token buckets and per-kind overrides; the state
`waiting_slot` holds a keyed job while its key has no free slot.

Admission and release are triggers on awa_jobs_hot, so every path that makes a keyed job
available or running takes a slot, and every path that moves it out frees its slot, in
the same transaction, including paths written later. Each trigger is guarded by a WHEN on
the key columns: rows without a key run no trigger function at all. There is no BEFORE
INSERT trigger, so COPY keeps inserting in batches.

Safe with jobs in flight: both columns are nullable without a default (no rewrite), the
waiting index is built CONCURRENTLY (so the migration is not atomic) and matches no row
yet; existing jobs have no key and never enter a trigger function.
"""

from django.db import migrations, models

from awa_django.channels import channel_sql

# The key's text, limits and digest live in the job's metadata until the insert trigger
# moves the digest to its column: every insert path (enqueue, COPY, cron, follow-ups,
# dead-letter retries) then carries the key with no statement of its own.
# AFTER UPDATE / DELETE of a job that held a slot and holds none now (0017 replaces it and
# its reverse puts this one back).
RELEASE = """CREATE OR REPLACE FUNCTION awa_key_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE awa_key_slots SET job_id = NULL
    WHERE key_digest = OLD.concurrency_key AND slot = OLD.key_slot AND job_id = OLD.id;
    PERFORM awa_key_hand_off(OLD.concurrency_key);
    RETURN NULL;
END $$;
"""

FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION awa_key_max(kind text, spec jsonb) RETURNS int
LANGUAGE sql STABLE AS $$
    -- The kind's runtime override, else the declared limit, else 1; at most 1000.
    SELECT least(greatest(coalesce(
        (SELECT l.max_in_flight FROM awa_key_limits l WHERE l.kind = awa_key_max.kind),
        CASE WHEN jsonb_typeof(spec -> 'max') = 'number' THEN (spec ->> 'max')::numeric::int END,
        1), 1), 1000)
$$;

-- Takes one token of key `k`'s bucket (rate per second, burst): 0 when taken, else the
-- seconds until the next token. The bucket row is locked SKIP LOCKED: a bucket another
-- transaction is taking from counts as empty for one token's time (conservative: the
-- rate is never exceeded, and admission never waits on a lock). Refilled from
-- clock_timestamp() taken after the lock, as rate_bucket_take (decision 017).
CREATE OR REPLACE FUNCTION awa_key_take_token(k bytea, rate float8, burst float8)
RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    bucket record;
    at timestamptz;
    held float8;
BEGIN
    SELECT b.tokens, b.refilled_at INTO bucket FROM awa_key_buckets b
    WHERE b.key_digest = k FOR UPDATE SKIP LOCKED;
    at := clock_timestamp();
    IF NOT FOUND THEN
        INSERT INTO awa_key_buckets (key_digest, tokens, refilled_at)
        VALUES (k, burst - 1, at) ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN 0;
        END IF;
        RETURN 1 / rate;
    END IF;
    held := least(burst, bucket.tokens
                  + rate * greatest(extract(epoch FROM at - bucket.refilled_at), 0));
    IF held >= 1 THEN
        UPDATE awa_key_buckets SET tokens = held - 1,
            refilled_at = greatest(at, bucket.refilled_at)
        WHERE key_digest = k;
        RETURN 0;
    END IF;
    RETURN (1 - held) / rate;
END $$;

-- Admission of job `j` (becoming available or running without a slot): a free slot of its
-- key below the key's max, locked FOR UPDATE SKIP LOCKED, then a token if the key is rate
-- limited; the slot's job_id is set to the job. No free slot: `waiting_slot`. No token:
-- `scheduled` at the next token (promotion brings it back here). Exact: a slot row holds
-- one job id at a time and is written only under its row lock. While a job still holds a
-- slot at or above the max (the max was lowered under it), nobody is admitted: otherwise
-- a freed low slot would be taken beside it, and more than the new max would be admitted.
-- Such slots are never taken again under that max, and a release not yet committed reads
-- as held, so the check is conservative; the release of the last one hands off as usual.
CREATE OR REPLACE FUNCTION awa_key_admit(j awa_jobs_hot) RETURNS awa_jobs_hot
LANGUAGE plpgsql AS $$
DECLARE
    spec jsonb := j.metadata -> '_awa_concurrency';
    max_in_flight int := awa_key_max(j.kind, spec);
    rate float8;
    burst float8;
    free smallint;
    wait float8;
BEGIN
    IF EXISTS (SELECT 1 FROM awa_key_slots s WHERE s.key_digest = j.concurrency_key
               AND s.slot >= max_in_flight AND s.job_id IS NOT NULL) THEN
        j.state := 'waiting_slot';
        RETURN j;
    END IF;
    SELECT s.slot INTO free FROM awa_key_slots s
    WHERE s.key_digest = j.concurrency_key AND s.slot < max_in_flight AND s.job_id IS NULL
    ORDER BY s.slot LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF free IS NULL AND (SELECT count(*) FROM awa_key_slots s WHERE s.key_digest =
                         j.concurrency_key AND s.slot < max_in_flight) < max_in_flight THEN
        -- First use of the key, or its max was raised: its missing slot rows.
        INSERT INTO awa_key_slots (key_digest, slot, job_id, key_text)
        SELECT j.concurrency_key, n, NULL, left(coalesce(spec ->> 'key', ''), 200)
        FROM generate_series(0, max_in_flight - 1) n
        ON CONFLICT DO NOTHING;
        SELECT s.slot INTO free FROM awa_key_slots s
        WHERE s.key_digest = j.concurrency_key AND s.slot < max_in_flight
          AND s.job_id IS NULL
        ORDER BY s.slot LIMIT 1 FOR UPDATE SKIP LOCKED;
    END IF;
    IF free IS NULL THEN
        j.state := 'waiting_slot';
        RETURN j;
    END IF;
    SELECT l.rate, l.burst INTO rate, burst FROM awa_key_limits l
    WHERE l.kind = j.kind AND l.rate IS NOT NULL;
    IF rate IS NULL AND jsonb_typeof(spec -> 'rate') = 'number' THEN
        rate := (spec ->> 'rate')::float8;
        burst := greatest(coalesce((spec ->> 'burst')::float8, 1), 1);
    END IF;
    IF rate > 0 THEN
        wait := awa_key_take_token(j.concurrency_key, rate, burst);
        IF wait > 0 THEN
            j.state := 'scheduled';
            j.run_at := now() + make_interval(secs => wait);
            RETURN j;
        END IF;
    END IF;
    UPDATE awa_key_slots SET job_id = j.id
    WHERE key_digest = j.concurrency_key AND slot = free;
    j.key_slot := free;
    RETURN j;
END $$;

-- AFTER INSERT, for rows whose metadata carries a key: the digest is written, and the
-- row's state is set to itself, which runs admission (the BEFORE UPDATE OF state trigger)
-- for an available row. AFTER, not BEFORE: any BEFORE ROW INSERT trigger on the table
-- makes COPY insert row by row instead of in batches, for every job, keyed or not.
CREATE OR REPLACE FUNCTION awa_key_enter() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    key text := NEW.metadata -> '_awa_concurrency' ->> 'key';
BEGIN
    IF key IS NOT NULL AND key <> '' THEN
        UPDATE awa_jobs_hot
        SET concurrency_key = substring(sha256(convert_to(key, 'UTF8')) FROM 1 FOR 16),
            key_slot = NULL, state = state
        WHERE id = NEW.id;
    END IF;
    RETURN NULL;
END $$;

-- BEFORE UPDATE OF state, for a keyed job without a slot becoming available or running.
CREATE OR REPLACE FUNCTION awa_key_admit_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW := awa_key_admit(NEW);
    RETURN NEW;
END $$;

-- BEFORE UPDATE OF state, for a job leaving the states that hold a slot.
CREATE OR REPLACE FUNCTION awa_key_drop_slot() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.key_slot := NULL;
    RETURN NEW;
END $$;

-- Admits the next job waiting for a slot of key `k` (dispatch order), if any and if a
-- slot is free for it, and wakes its queue. SKIP LOCKED: a waiting job another
-- transaction is moving is left to it.
CREATE OR REPLACE FUNCTION awa_key_hand_off(k bytea) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    admitted record;
BEGIN
    UPDATE awa_jobs_hot SET state = 'available'
    WHERE id = (SELECT w.id FROM awa_jobs_hot w
                WHERE w.concurrency_key = k AND w.state = 'waiting_slot'
                ORDER BY w.priority, w.run_at, w.id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING state, queue INTO admitted;
    IF admitted.state = 'available' THEN
        PERFORM pg_notify({channel_sql("admitted.queue")}, '');
    END IF;
END $$;

-- AFTER UPDATE / DELETE of a job that held a slot and holds none now: the slot is freed
-- (guarded by the job id) and handed to the key's next waiting job, in this transaction.
{RELEASE}
-- A job waiting for a slot holds its unique key like an available one (it is one that
-- is not admitted yet). No existing row is waiting_slot, so the unique index's entries
-- are unchanged.
CREATE OR REPLACE FUNCTION awa_state_in_unique_states(unique_states text, state text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT substr(unique_states, CASE state
        WHEN 'scheduled' THEN 1 WHEN 'available' THEN 2 WHEN 'running' THEN 3
        WHEN 'completed' THEN 4 WHEN 'retryable' THEN 5 WHEN 'failed' THEN 6
        WHEN 'cancelled' THEN 7 WHEN 'waiting_external' THEN 8
        WHEN 'waiting_slot' THEN 2 END, 1) = '1'
$$;
"""

# The states that hold a slot: available and running; waiting_external keeps the slot of
# a sequential wait (the park statement drops it itself, decision 045).
_HOLDING = "('available', 'running', 'waiting_external')"
TRIGGERS = f"""
CREATE TRIGGER awa_key_enter AFTER INSERT ON awa_jobs_hot FOR EACH ROW
    WHEN (NEW.metadata ? '_awa_concurrency') EXECUTE FUNCTION awa_key_enter();
CREATE TRIGGER awa_key_admit BEFORE UPDATE OF state ON awa_jobs_hot FOR EACH ROW
    WHEN (NEW.concurrency_key IS NOT NULL AND NEW.key_slot IS NULL
          AND NEW.state IN ('available', 'running'))
    EXECUTE FUNCTION awa_key_admit_row();
CREATE TRIGGER awa_key_drop_slot BEFORE UPDATE OF state ON awa_jobs_hot FOR EACH ROW
    WHEN (OLD.key_slot IS NOT NULL AND NEW.state NOT IN {_HOLDING})
    EXECUTE FUNCTION awa_key_drop_slot();
CREATE TRIGGER awa_key_release AFTER UPDATE OF state, key_slot ON awa_jobs_hot FOR EACH ROW
    WHEN (OLD.key_slot IS NOT NULL AND NEW.key_slot IS NULL)
    EXECUTE FUNCTION awa_key_release();
CREATE TRIGGER awa_key_release_deleted AFTER DELETE ON awa_jobs_hot FOR EACH ROW
    WHEN (OLD.key_slot IS NOT NULL) EXECUTE FUNCTION awa_key_release();
"""

DROP = """
DROP TRIGGER IF EXISTS awa_key_enter ON awa_jobs_hot;
DROP TRIGGER IF EXISTS awa_key_admit ON awa_jobs_hot;
DROP TRIGGER IF EXISTS awa_key_drop_slot ON awa_jobs_hot;
DROP TRIGGER IF EXISTS awa_key_release ON awa_jobs_hot;
DROP TRIGGER IF EXISTS awa_key_release_deleted ON awa_jobs_hot;
DROP FUNCTION IF EXISTS awa_key_release();
DROP FUNCTION IF EXISTS awa_key_hand_off(bytea);
DROP FUNCTION IF EXISTS awa_key_drop_slot();
DROP FUNCTION IF EXISTS awa_key_admit_row();
DROP FUNCTION IF EXISTS awa_key_enter();
DROP FUNCTION IF EXISTS awa_key_admit(awa_jobs_hot);
DROP FUNCTION IF EXISTS awa_key_take_token(bytea, float8, float8);
DROP FUNCTION IF EXISTS awa_key_max(text, jsonb);
"""

WAITING_INDEX = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS awa_jobs_waiting_slot_idx ON awa_jobs_hot "
    "(concurrency_key, priority, run_at, id) WHERE state = 'waiting_slot'"
)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("awa_django", "0013_workflows")]

    operations = [
        migrations.CreateModel(
            name="KeyBucket",
            fields=[
                ("key_digest", models.BinaryField(primary_key=True, serialize=False)),
                ("tokens", models.FloatField()),
                ("refilled_at", models.DateTimeField()),
            ],
            options={
                "db_table": "awa_key_buckets",
            },
        ),
        migrations.CreateModel(
            name="KeyLimit",
            fields=[
                ("kind", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("max_in_flight", models.PositiveIntegerField(blank=True, null=True)),
                ("rate", models.FloatField(blank=True, null=True)),
                ("burst", models.PositiveIntegerField(blank=True, null=True)),
                ("updated_by", models.CharField(blank=True, default="", max_length=200)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "db_table": "awa_key_limits",
            },
        ),
        migrations.CreateModel(
            name="KeySlot",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "key_digest",
                        "slot",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("key_digest", models.BinaryField()),
                ("slot", models.SmallIntegerField()),
                ("job_id", models.BigIntegerField(blank=True, null=True)),
                ("key_text", models.CharField(blank=True, default="", max_length=200)),
            ],
            options={
                "db_table": "awa_key_slots",
            },
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_key",
            field=models.BinaryField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="key_slot",
            field=models.SmallIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name="job",
            name="state",
            field=models.CharField(
                choices=[
                    ("scheduled", "Scheduled"),
                    ("waiting_parents", "Waiting Parents"),
                    ("available", "Available"),
                    ("running", "Running"),
                    ("waiting_external", "Waiting External"),
                    ("retryable", "Retryable"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                    ("waiting_slot", "Waiting Slot"),
                ],
                default="available",
                max_length=20,
            ),
        ),
        migrations.AddConstraint(
            model_name="keylimit",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("max_in_flight__isnull", True),
                    models.Q(("max_in_flight__gte", 1), ("max_in_flight__lte", 1000)),
                    _connector="OR",
                ),
                name="awa_key_limits_max_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="keylimit",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("burst__isnull", True), ("rate__isnull", True)),
                    models.Q(("burst__gte", 1), ("rate__gt", 0)),
                    _connector="OR",
                ),
                name="awa_key_limits_rate_valid",
            ),
        ),
        migrations.RunSQL(FUNCTIONS, reverse_sql=DROP),
        migrations.RunSQL(TRIGGERS, reverse_sql=migrations.RunSQL.noop),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    WAITING_INDEX,
                    reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS awa_jobs_waiting_slot_idx",
                )
            ],
            state_operations=[
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("state", "waiting_slot")),
                        fields=["concurrency_key", "priority", "run_at", "id"],
                        name="awa_jobs_waiting_slot_idx",
                    ),
                ),
            ],
        ),
    ]
