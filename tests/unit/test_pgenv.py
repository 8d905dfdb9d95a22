"""The newcomer tooling in devtools/: the PostgreSQL wrapper, the check runner, the venv
bootstrap. Everything here runs without any database (the real embedded server is started
in tests/acceptance/test_pgenv_server.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    """Import a devtools script (a plain file, not a package) under a private name."""
    spec = importlib.util.spec_from_file_location(
        f"awa_devtools_{name}", PROJECT_DIR / "devtools" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:  # mypy reads the scripts as the namespace package `devtools`
    from devtools import check
    from devtools import pgenv as pgenv  # as pgenv: test_pgenv_server imports it from here
else:
    pgenv = load("pgenv")
    check = load("check")


class FakeServer(pgenv.Embedded):
    """An Embedded whose process side is simulated: records starts and stops."""

    port: int | None = None
    calls: list[str]

    def __init__(self, root: Path, running_on: int | None = None) -> None:
        super().__init__(root)
        object.__setattr__(self, "calls", [])
        object.__setattr__(self, "port", running_on)

    def running_port(self) -> int | None:
        return self.port

    def ensure_initialized(self) -> None:
        self.calls.append("init")

    def start(self) -> int:
        self.calls.append("start")
        object.__setattr__(self, "port", 5999)
        return 5999

    def stop(self) -> None:
        self.calls.append("stop")
        object.__setattr__(self, "port", None)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# -- sharing the embedded server -------------------------------------------------------------
def test_the_wrapper_that_started_the_server_stops_it(tmp_path: Path) -> None:
    server = FakeServer(tmp_path)
    assert pgenv.acquire(server, os.getpid()) == 5999
    pgenv.release(server, os.getpid())
    assert server.calls == ["init", "start", "stop"]


def test_the_server_keeps_running_while_another_wrapper_uses_it(tmp_path: Path) -> None:
    server = FakeServer(tmp_path)
    pgenv.acquire(server, os.getpid())
    pgenv.acquire(server, os.getppid())  # a second, live wrapper joins
    pgenv.release(server, os.getpid())
    assert "stop" not in server.calls
    pgenv.release(server, os.getppid())
    assert server.calls[-1] == "stop"


def test_a_crashed_wrapper_does_not_keep_the_server_alive(tmp_path: Path) -> None:
    server = FakeServer(tmp_path)
    pgenv.acquire(server, dead_pid())  # registered, then died without releasing
    pgenv.acquire(server, os.getpid())
    pgenv.release(server, os.getpid())
    assert server.calls[-1] == "stop"


def test_a_server_started_by_hand_is_never_stopped_by_a_wrapper(tmp_path: Path) -> None:
    server = FakeServer(tmp_path, running_on=6001)
    assert pgenv.acquire(server, os.getpid()) == 6001
    pgenv.release(server, os.getpid())
    assert server.calls == []


# -- small parts -----------------------------------------------------------------------------
def test_postmaster_pid_gives_pid_and_port(tmp_path: Path) -> None:
    pid_file = tmp_path / "postmaster.pid"
    pid_file.write_text("4242\n/data\n1712346200\n54321\n\n127.0.0.1\n  1  2\nready\n")
    assert pgenv.read_postmaster_pid(pid_file) == (4242, 54321)
    pid_file.write_text("garbage\n")
    assert pgenv.read_postmaster_pid(pid_file) is None
    assert pgenv.read_postmaster_pid(tmp_path / "absent") is None


def test_a_reused_pid_is_not_taken_for_postgres() -> None:
    assert pgenv.postgres_alive(os.getpid()) is False
    assert pgenv.postgres_alive(dead_pid()) is False


def test_messages_never_show_a_password() -> None:
    assert pgenv.redact("postgres://app:s3cret@db:5432/x") == "postgres://app:***@db:5432/x"
    assert pgenv.redact("postgres://postgres@127.0.0.1/x") == "postgres://postgres@127.0.0.1/x"


def test_arguments_need_a_command_or_an_action() -> None:
    assert pgenv.parse_args(["--", "make", "-k"]).command == ["make", "-k"]
    assert pgenv.parse_args(["--status"]).action == "status"
    for bad in ([], ["--start", "--", "ls"]):
        with pytest.raises(SystemExit):
            pgenv.parse_args(bad)


def test_the_command_exit_code_is_passed_on() -> None:
    env = dict(os.environ)
    assert pgenv.run_command(["sh", "-c", "exit 3"], env) == 3
    assert pgenv.run_command(["sh", "-c", "kill -TERM $$"], env) == 128 + signal.SIGTERM


# -- the check runner ------------------------------------------------------------------------
def test_a_test_run_that_collects_nothing_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_steps(_args: list[str]) -> list[tuple[str, list[str]]]:
        ok = [sys.executable, "-c", "pass"]
        return [("ruff check", ok), ("pytest", [sys.executable, "-c", "raise SystemExit(5)"])]

    monkeypatch.setattr(check, "steps", fake_steps)
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert "no tests were collected" in out
    assert "check: FAILED: pytest" in out


def test_every_step_runs_even_after_a_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_steps(_args: list[str]) -> list[tuple[str, list[str]]]:
        fail = [sys.executable, "-c", "raise SystemExit(1)"]
        return [("ruff check", fail), ("pytest", [sys.executable, "-c", "pass"])]

    monkeypatch.setattr(check, "steps", fake_steps)
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert "check: FAILED: ruff check in" in out
    assert "pytest       ok" in out


# -- the venv bootstrap ----------------------------------------------------------------------
def test_bootstrap_skips_a_python_that_does_not_run(tmp_path: Path) -> None:
    # Like a pyenv shim for a version that is not selected: on PATH, but failing.
    shim = tmp_path / "python3.13"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    env.pop("PYTHON", None)
    found = subprocess.run(
        ["bash", str(PROJECT_DIR / "devtools" / "bootstrap.sh"), "--find-python"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert found and found != "python3.13"
    version = subprocess.run(
        [found, "-c", "import sys; print(sys.version_info >= (3, 12))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.strip() == "True"
