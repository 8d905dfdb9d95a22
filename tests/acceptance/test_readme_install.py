"""The README's install section, verbatim, in a fresh `django-admin startproject`: the
settings block it shows is appended as it stands, then `migrate` and `check` must pass
against a new PostgreSQL database (the brief: "works verbatim in a fresh startproject")."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent.parent
MARKER = "<!-- install:settings"

pytestmark = pytest.mark.acceptance


def readme_settings_block() -> str:
    """The ```python block right after the install marker in README.md."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(MARKER) :]
    found = re.search(r"```python\n(.*?)```", after, re.S)
    assert found is not None, "README.md lost its install settings block"
    return found.group(1)


@pytest.fixture
def fresh_database() -> Iterator[dict[str, str]]:
    """A new, empty database on the test server, as the PG* variables the block reads."""
    params = connection.get_connection_params()
    env = {
        "PGHOST": str(params.get("host") or "127.0.0.1"),
        "PGPORT": str(params.get("port") or 5432),
        "PGUSER": str(params.get("user") or "postgres"),
        "PGPASSWORD": str(params.get("password") or ""),
        "PGDATABASE": f"awa_readme_{secrets.token_hex(4)}",
    }
    with psycopg.connect(
        host=env["PGHOST"],
        port=env["PGPORT"],
        user=env["PGUSER"],
        password=env["PGPASSWORD"],
        dbname="postgres",
        autocommit=True,
    ) as admin:
        admin.execute(f'CREATE DATABASE "{env["PGDATABASE"]}"')
        try:
            yield env
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{env["PGDATABASE"]}" WITH (FORCE)')


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_readme_install_section_works_verbatim_in_a_fresh_project(
    tmp_path: Path, fresh_database: dict[str, str]
) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    env.update(fresh_database, AWA_CALLBACK_SECRET=secrets.token_hex(32))
    made = run(["-m", "django", "startproject", "mysite", str(tmp_path)], ROOT, env)
    assert made.returncode == 0, made.stderr
    settings = tmp_path / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + readme_settings_block())

    migrated = run(["manage.py", "migrate", "--no-input"], tmp_path, env)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "Applying awa_django.0005_unique_jobs... OK" in migrated.stdout
    checked = run(["manage.py", "check"], tmp_path, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "System check identified no issues" in checked.stdout


def test_without_django_contrib_postgres_the_check_says_what_to_add(
    tmp_path: Path, fresh_database: dict[str, str]
) -> None:
    """Issue 14 item 5: a user who leaves django.contrib.postgres out of the snippet gets
    awa.E030 naming the line to add, not a traceback at migrate."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    env.update(fresh_database, AWA_CALLBACK_SECRET=secrets.token_hex(32))
    made = run(["-m", "django", "startproject", "mysite", str(tmp_path)], ROOT, env)
    assert made.returncode == 0, made.stderr
    block = readme_settings_block()
    without = block.replace('"django.contrib.postgres", ', "")
    assert without != block, "the README snippet no longer adds django.contrib.postgres"
    settings = tmp_path / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + without)

    checked = run(["manage.py", "check"], tmp_path, env)

    assert checked.returncode != 0
    assert "awa.E030" in checked.stderr
    assert 'INSTALLED_APPS += ["django.contrib.postgres", "awa_django"]' in checked.stderr
