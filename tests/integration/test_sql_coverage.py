"""Every named statement of the statement modules `test_sql_*.py` cover has a test named
after it, and is run through one typed function of the same name (STYLE §18)."""

from __future__ import annotations

from types import ModuleType

from awa_django.storage.sql import Statement, job_copy
from awa_django.storage.sql import admin as admin_sql
from awa_django.storage.sql import cron as cron_sql
from awa_django.storage.sql import jobs as jobs_sql
from awa_django.storage.sql import keys as keys_sql
from awa_django.storage.sql import leases as leases_sql
from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql import rollups as rollups_sql
from awa_django.storage.sql import unique as unique_sql
from awa_django.storage.sql import wakers as wakers_sql
from awa_django.storage.sql import workers as workers_sql
from tests.integration import (
    test_observability,
    test_sql_admin,
    test_sql_cron,
    test_sql_job_copy,
    test_sql_jobs,
    test_sql_keys,
    test_sql_leases,
    test_sql_maintenance,
    test_sql_unique,
    test_sql_wakers,
    test_sql_workers,
    test_workflow_observability,
)

# The observability statements are tested beside the figures they feed.
TEST_MODULES: tuple[ModuleType, ...] = (
    test_sql_jobs,
    test_sql_job_copy,
    test_sql_keys,
    test_sql_leases,
    test_sql_maintenance,
    test_sql_admin,
    test_sql_workers,
    test_sql_cron,
    test_sql_unique,
    test_sql_wakers,
    test_observability,
    test_workflow_observability,
)


def test_every_named_statement_has_a_test_named_after_it() -> None:
    modules = (
        jobs_sql,
        job_copy,
        keys_sql,
        leases_sql,
        maintenance_sql,
        admin_sql,
        workers_sql,
        cron_sql,
        unique_sql,
        rollups_sql,
        wakers_sql,
    )
    statements = [
        (module, value)
        for module in modules
        for value in vars(module).values()
        if isinstance(value, Statement)
    ]
    tests = [name for module in TEST_MODULES for name in vars(module) if name.startswith("test_")]
    untested = sorted(s.name for _, s in statements if not any(s.name in t for t in tests))
    assert untested == []
    for module, statement in statements:
        assert callable(getattr(module, statement.name, None)), statement.name
