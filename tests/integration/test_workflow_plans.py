"""The workflow trigger functions keep their generic plans (decision 043, "Cost"; migration
0016). The setting lives on the function, so a later CREATE OR REPLACE that forgets its
SET clause drops it without any other symptom than a slower chain: this test is the alarm.
"""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

FUNCTIONS = ("awa_workflow_parent_ended", "awa_workflow_settle")


def function_settings(name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = %s", [name])
        rows = cursor.fetchall()
    assert len(rows) == 1, f"{name}: expected one function, found {len(rows)}"
    return list(rows[0][0])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_trigger_function_plans_generically(name: str) -> None:
    assert function_settings(name) == ["plan_cache_mode=force_generic_plan"]
