"""Unit tests of the deployment settings (decision 020): LISTEN_DATABASE and READ_DATABASE
parsing, where the worker's connections go behind a transaction pooler (no prepared
statements, no `options` startup parameter, no LISTEN), and the checks that name a
mistake (awa.E031-E033). No database is contacted."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.test import override_settings

from awa_django.conf import AwaSettings, awa_settings
from awa_django.setup_checks import check_aliases, task_framework_problems
from awa_django.worker.database import Database, connection_kwargs, listen_kwargs


def settings_from(awa: dict[str, Any]) -> AwaSettings:
    with override_settings(AWA=awa):
        return awa_settings()


@pytest.fixture
def pooled_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """DATABASES["default"] as behind PgBouncer in transaction mode."""
    monkeypatch.setitem(connections["default"].settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)


def test_listen_and_read_databases_default_to_none() -> None:
    s = settings_from({})
    assert (s.listen_database, s.read_database) == (None, None)


@pytest.mark.parametrize("value", [False, "replica", "postgres://u@db:5432/app"])
def test_listen_database_takes_false_an_alias_or_a_dsn(value: object) -> None:
    assert settings_from({"LISTEN_DATABASE": value}).listen_database == value


@pytest.mark.parametrize("value", [True, "", "  ", 5, ["default"]])
def test_other_listen_databases_are_refused_with_the_choices(value: object) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"alias, a libpq DSN .* False"):
        settings_from({"LISTEN_DATABASE": value})


def test_read_database_must_be_a_string() -> None:
    assert settings_from({"READ_DATABASE": "replica"}).read_database == "replica"
    with pytest.raises(ImproperlyConfigured, match="READ_DATABASE"):
        settings_from({"READ_DATABASE": 1})


def test_without_a_pooler_the_worker_listens_on_its_own_database() -> None:
    kwargs = listen_kwargs(None, "default", "w")
    assert kwargs == connection_kwargs("default", "w")
    assert kwargs is not None and kwargs["autocommit"] is True
    assert "prepare_threshold" not in kwargs  # psycopg's default: prepared statements


def test_listen_database_false_means_no_listen_connection() -> None:
    assert listen_kwargs(False, "default", "w") is None


@pytest.mark.usefixtures("pooled_default")
def test_behind_a_pooler_there_is_no_listen_and_no_session_state() -> None:
    assert listen_kwargs(None, "default", "w") is None
    kwargs = connection_kwargs("default", "w")
    assert kwargs["prepare_threshold"] is None  # Django's: no prepared statements
    db = Database("default", "w", max_size=1)
    assert db.pooled and db.listen_kwargs is None
    assert "options" not in db.heartbeat_kwargs  # PgBouncer 1.18 refuses the parameter


def test_outside_a_pooler_heartbeats_skip_the_flush_wait() -> None:
    db = Database("default", "w", max_size=1)
    assert not db.pooled
    assert "synchronous_commit=off" in db.heartbeat_kwargs["options"]


@pytest.mark.usefixtures("pooled_default")
def test_prepared_statements_come_back_when_options_ask(monkeypatch) -> None:
    options = {**connections["default"].settings_dict["OPTIONS"], "prepare_threshold": 3}
    monkeypatch.setitem(connections["default"].settings_dict, "OPTIONS", options)
    assert connection_kwargs("default", "w")["prepare_threshold"] == 3


@pytest.mark.usefixtures("pooled_default")
def test_a_listen_alias_or_dsn_goes_past_the_pooler() -> None:
    replica = listen_kwargs("replica", "default", "w")
    assert replica is not None
    assert replica["dbname"] == connections["replica"].settings_dict["NAME"]
    dsn = listen_kwargs("postgres://bob@db-primary:6543/app", "default", "w")
    assert dsn is not None
    assert (dsn["host"], dsn["port"], dsn["user"], dsn["dbname"]) == (
        "db-primary",
        "6543",
        "bob",
        "app",
    )
    assert dsn["autocommit"] is True and dsn["application_name"] == "w"
    assert dsn["keepalives"] == 1  # the liveness defaults apply to a DSN too
    keywords = listen_kwargs("host=db-primary dbname=app", "default", "w")
    assert keywords is not None and keywords["host"] == "db-primary"


def test_a_listen_alias_behind_the_pooler_is_refused(monkeypatch) -> None:
    monkeypatch.setitem(connections["replica"].settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    with pytest.raises(ImproperlyConfigured, match="reaches PostgreSQL directly"):
        listen_kwargs("replica", "default", "w")


@pytest.mark.parametrize(
    ("value", "message"),
    [("replcia", "neither a DATABASES alias nor a DSN"), ("host=h nonsense=1", "not a valid")],
)
def test_a_misspelt_listen_database_is_refused(value: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        listen_kwargs(value, "default", "w")


def test_checks_name_an_unknown_read_alias_and_a_bad_listen_database() -> None:
    with override_settings(AWA={"READ_DATABASE": "nope", "LISTEN_DATABASE": "replcia"}):
        problems = check_aliases()
    assert [p.id for p in problems] == ["awa.E032", "awa.E033"]
    assert "'nope'" in problems[0].msg and "'replcia'" in problems[1].msg
    with override_settings(AWA={"READ_DATABASE": "replica", "LISTEN_DATABASE": "replica"}):
        assert check_aliases() == []


def test_awa_backend_without_a_task_framework_says_what_to_install() -> None:
    tasks = {"default": {"BACKEND": "awa_django.backends.AwaBackend"}}
    (problem,) = task_framework_problems(False, tasks)
    assert problem.id == "awa.E031"
    assert 'pip install "awa-django[tasks]"' in problem.msg
    assert task_framework_problems(True, tasks) == []
    other = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    assert task_framework_problems(False, other) == []
