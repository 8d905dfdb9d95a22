"""A real PostgreSQL trigger that refuses chosen outcome writes (decision 036's tests).

It is counted by a sequence: a sequence is not rolled back with the refused transaction,
so "once" stays once even when the refusal aborts an atomic handler's whole transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.db import connection

Refuse = Callable[..., None]


@pytest.fixture
def refuse() -> Iterator[Refuse]:
    """`refuse(job_id, state, errcode, times=1)`: the next `times` updates that move the
    running job `job_id` to `state` raise SQLSTATE `errcode`. Dropped after the test (a
    trigger outlives the test's TRUNCATE), and checked gone."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE TABLE test_refusals (job_id bigint, state text, errcode text, times int);
            CREATE SEQUENCE test_refusals_seen;
            CREATE FUNCTION test_refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE wanted test_refusals;
            BEGIN
                SELECT * INTO wanted FROM test_refusals
                    WHERE job_id = NEW.id AND state = NEW.state::text;
                IF FOUND AND OLD.state = 'running'
                        AND nextval('test_refusals_seen') <= wanted.times THEN
                    RAISE EXCEPTION 'test: the database refuses this outcome'
                        USING ERRCODE = wanted.errcode;
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER test_refuse_outcome BEFORE UPDATE ON awa_jobs_hot
                FOR EACH ROW EXECUTE FUNCTION test_refuse_outcome();
            """
        )

    def arm(job_id: int, state: str, errcode: str, times: int = 1) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO test_refusals VALUES (%s, %s, %s, %s)", [job_id, state, errcode, times]
            )

    try:
        yield arm
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS test_refuse_outcome ON awa_jobs_hot")
            cursor.execute("DROP FUNCTION IF EXISTS test_refuse_outcome()")
            cursor.execute("DROP TABLE IF EXISTS test_refusals")
            cursor.execute("DROP SEQUENCE IF EXISTS test_refusals_seen")
            cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'test_refuse_outcome'")
            assert cursor.fetchone()[0] == 0
