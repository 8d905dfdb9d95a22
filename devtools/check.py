"""The README's test command: lint, format, migrations, types, layers, then the test suite.

    python devtools/check.py [PYTEST ARG ...]

Runs every step even after one fails (so one run shows every problem), prints a summary
with each step's time, and exits non-zero if any step failed. pytest's exit code 5 (no
tests collected) counts as a failure: a suite that ran nothing proves nothing. Expects
DATABASE_URL to be set (devtools/pgenv.py does that).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Result:
    name: str
    code: int
    seconds: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.code == 0


def steps(pytest_args: Sequence[str]) -> list[tuple[str, list[str]]]:
    python = sys.executable
    return [
        ("ruff check", [str(BIN / "ruff"), "check", "."]),
        ("ruff format", [str(BIN / "ruff"), "format", "--check", "."]),
        ("migrations", [python, "manage.py", "makemigrations", "--check", "--dry-run"]),
        # [tool.mypy]: strict on the package; tests and testproject need no annotations but
        # every body is checked (devtools comes in through tests/unit/test_pgenv.py).
        ("mypy", [str(BIN / "mypy"), "awa_django", "tests", "testproject"]),
        # The layer rules of docs/decisions/007-layout-and-vocabulary.md ([tool.importlinter]).
        ("imports", [str(BIN / "lint-imports"), "--no-cache"]),
        # --durations names the slow tests, to keep the suite's time in check.
        ("pytest", [python, "-m", "pytest", "--durations=10", *pytest_args]),
    ]


def run_step(name: str, command: list[str]) -> Result:
    print(f"\n=== {name}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    if name != "mypy":
        code = subprocess.call(command, cwd=PROJECT_DIR)
        return Result(name, code, time.monotonic() - started, explain(name, code))
    # mypy's output is echoed and its error count kept for the summary.
    done = subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True)
    print(done.stdout + done.stderr, end="", flush=True)
    match = re.search(r"Found (\d+) errors?", done.stdout)
    note = f"{match.group(1)} errors" if match else ""
    return Result(name, done.returncode, time.monotonic() - started, note)


def explain(name: str, code: int) -> str:
    if name == "pytest" and code == 5:
        return "no tests were collected"
    return ""


def summary(results: Sequence[Result]) -> str:
    lines = ["", "=== summary"]
    for result in results:
        status = "ok" if result.ok else f"FAILED (exit {result.code})"
        note = f"  {result.note}" if result.note else ""
        lines.append(f"  {result.name:<12} {status:<18} {result.seconds:7.1f} s{note}")
    failed = [r.name for r in results if not r.ok]
    total = sum(r.seconds for r in results)
    verdict = f"FAILED: {', '.join(failed)}" if failed else "all checks passed"
    lines.append(f"check: {verdict} in {total:.1f} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    pytest_args = list(sys.argv[1:] if argv is None else argv)
    results = [run_step(name, command) for name, command in steps(pytest_args)]
    print(summary(results), flush=True)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
