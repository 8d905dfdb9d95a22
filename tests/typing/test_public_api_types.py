"""mypy, run on `check_public_api.py` with the project's configuration, accepts the right
usages of the public API and rejects each wrong one with the expected error: the types
users see (`@job`, `on_event`, `enqueue` & co., `Client`) say what the code does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
CHECKED = Path(__file__).with_name("check_public_api.py")
EXPECTED = re.compile(r"#\s*E:\s*([\w-]+)\s*$")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[\w-]+)\]$")


def expected_errors() -> set[tuple[int, str]]:
    lines = CHECKED.read_text().splitlines()
    return {(n, m[1]) for n, line in enumerate(lines, 1) if (m := EXPECTED.search(line))}


def mypy_errors(cache_dir: Path) -> tuple[set[tuple[int, str]], str]:
    # A fresh cache directory: about 3 s cold, and never contended with a developer's mypy.
    command = [sys.executable, "-m", "mypy", "--cache-dir", str(cache_dir), str(CHECKED)]
    done = subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=240)
    found = {
        (int(m["line"]), m["code"])
        for m in map(ERROR.match, done.stdout.splitlines())
        if m is not None and Path(m["path"]).name == CHECKED.name
    }
    return found, done.stdout + done.stderr


def test_mypy_accepts_the_right_usages_and_rejects_each_wrong_one(tmp_path: Path) -> None:
    expected = expected_errors()
    assert len(expected) >= 10  # the markers themselves were found

    found, output = mypy_errors(tmp_path / "mypy_cache")

    assert "INTERNAL ERROR" not in output, output
    assert found == expected, output
