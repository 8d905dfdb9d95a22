"""Build the sdist and wheel, then install the wheel as a new user would and follow the
README's install section literally, once per Django version (CI runs it for 5.2 and the
newest supported; issue 14):

    python devtools/wheel_check.py "Django>=5.2,<5.3" "Django>=6.1,<6.2"

For each: a fresh virtualenv outside the checkout, `pip install "<wheel>[binary]"`, a fresh
`django-admin startproject`, the README's settings block appended verbatim, `createdb` and
`migrate`, the README's `SendReceipt` job run by `awa_worker`, and an admin smoke test (job
list, detail, dashboard, and every template and static file the package ships). The wheel's
file list is compared with the source tree first, so a template, static file or migration
left out of the package data fails here, not in a user's project. Needs DATABASE_URL.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DATA = ("templates", "static", "migrations")

ADMIN_SMOKE = """
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.template.loader import get_template
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()
user = get_user_model().objects.create_superuser("wheel", "w@example.com", "pw")
http = Client()
http.force_login(user)
for url in ("/admin/awa_django/job/", "/admin/awa_django/job/{job_id}/change/",
            "/admin/awa_django/job/dashboard/"):
    status = http.get(url).status_code
    assert status == 200, (url, status)
for name in {templates!r}:
    get_template(name)
for path in {statics!r}:
    assert finders.find(path), f"static file {{path}} not found"
print("admin smoke test passed")
"""


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def readme_block(after: str) -> str:
    """The first ```python block after the line containing `after` in README.md."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"```python\n(.*?)```", text[text.index(after) :], re.S)
    if found is None:
        raise RuntimeError(f"README.md has no python block after {after!r}")
    return found.group(1)


def build(dist: Path) -> Path:
    """sdist, then the wheel built from that sdist (`python -m build`)."""
    print("wheel check: building the sdist and the wheel", flush=True)
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], ROOT, dict(os.environ))
    (wheel,) = dist.glob("awa_django-*.whl")
    (sdist,) = dist.glob("awa_django-*.tar.gz")
    print(f"wheel check: built {sdist.name} and {wheel.name}", flush=True)
    return wheel


def shipped(wheel: Path) -> tuple[list[str], list[str]]:
    """Every template, static file and migration of the source tree must be in the wheel;
    returns the template names and static paths for the smoke test."""
    names = set(zipfile.ZipFile(wheel).namelist())
    source = ROOT / "awa_django"
    expected = [
        path.relative_to(ROOT).as_posix()
        for folder in PACKAGE_DATA
        for path in (source / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ]
    expected.append("awa_django/py.typed")
    missing = sorted(set(expected) - names)
    if missing:
        raise RuntimeError(f"the wheel lacks {len(missing)} file(s): {', '.join(missing[:20])}")
    templates = [n.split("templates/", 1)[1] for n in expected if "/templates/" in n]
    statics = [n.split("static/", 1)[1] for n in expected if "/static/" in n]
    print(f"wheel check: the wheel ships all {len(expected)} data files", flush=True)
    return templates, statics


def pg_env(database: str) -> dict[str, str]:
    url = urlsplit(os.environ["DATABASE_URL"])
    return {
        "PGHOST": url.hostname or "127.0.0.1",
        "PGPORT": str(url.port or 5432),
        "PGUSER": unquote(url.username or "postgres"),
        "PGPASSWORD": unquote(url.password or ""),
        "PGDATABASE": database,
    }


def check_version(
    wheel: Path, requirement: str, work: Path, data: tuple[list[str], list[str]]
) -> str:
    work.mkdir(parents=True)
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], work, dict(os.environ))
    python = str(venv / "bin" / "python")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    # The README's command, with the built wheel in place of the index name.
    run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            f"awa-django[binary] @ {wheel.as_uri()}",
            requirement,
        ],
        work,
        env,
    )
    version = run([python, "-c", "import django; print(django.get_version())"], work, env).strip()
    project = work / "project"
    project.mkdir()
    env.update(
        pg_env(f"awa_wheel_{secrets.token_hex(4)}"), AWA_CALLBACK_SECRET=secrets.token_hex(32)
    )
    run([str(venv / "bin" / "django-admin"), "startproject", "mysite", "."], project, env)
    # Before the settings name it in INSTALLED_APPS, as in the README.
    run([python, "manage.py", "startapp", "shop"], project, env)
    settings = project / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + readme_block("<!-- install:settings"))
    (project / "mysite" / "urls.py").write_text(readme_block("<!-- install:urls"))
    (project / "shop" / "jobs.py").write_text(readme_block("<!-- install:jobs"))
    run(["createdb", env["PGDATABASE"]], project, env)
    try:
        run([python, "manage.py", "migrate", "--no-input"], project, env)
        job_id = one_job_through_a_worker(python, project, env)
        templates, statics = data
        script = ADMIN_SMOKE.format(job_id=job_id, templates=templates, statics=statics)
        run([python, "manage.py", "shell", "-v", "0", "-c", script], project, env)
    finally:
        subprocess.run(
            ["dropdb", "--force", "--if-exists", env["PGDATABASE"]], env=env, check=False
        )
    return version


def one_job_through_a_worker(python: str, project: Path, env: dict[str, str]) -> str:
    enqueue = (
        "import awa_django; from shop.jobs import SendReceipt; "
        "print(awa_django.enqueue(SendReceipt(order_id=1)).id)"
    )
    job_id = run([python, "manage.py", "shell", "-v", "0", "-c", enqueue], project, env).strip()
    state_of = f"import awa_django; print(awa_django.Client().get_job({job_id}).state)"
    log = project / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [python, "manage.py", "awa_worker"],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while (
            state := run(
                [python, "manage.py", "shell", "-v", "0", "-c", state_of], project, env
            ).strip()
        ) != "completed":
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"job {job_id} is {state}; worker log:\n{log.read_text()}")
            time.sleep(0.5)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    if code != 0:
        raise RuntimeError(f"awa_worker exited {code} on SIGTERM:\n{log.read_text()}")
    return job_id


def main(requirements: list[str]) -> int:
    work = Path(tempfile.mkdtemp(prefix="awa-wheel-check-"))  # outside the checkout
    results: list[tuple[str, str]] = []
    try:
        wheel = build(work / "dist")
        data = shipped(wheel)
        for number, requirement in enumerate(requirements):
            print(
                f"wheel check: {requirement}: installing the wheel in a fresh virtualenv",
                flush=True,
            )
            try:
                version = check_version(wheel, requirement, work / f"v{number}", data)
                results.append((f"Django {version}", "PASSED"))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(exc, flush=True)
                results.append((requirement, "FAILED"))
    except RuntimeError as exc:
        print(exc, flush=True)
        results.append(("build", "FAILED"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, verdict in results:
        steps = "startproject, README settings, migrate, one job through awa_worker, admin"
        print(f"wheel check: {name}: {verdict} ({steps})")
    return 0 if results and all(v == "PASSED" for _, v in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["Django>=6.1,<6.2"]))
