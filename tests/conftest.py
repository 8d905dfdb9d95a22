"""Shared fixtures. Every test runs against a real PostgreSQL (DATABASE_URL)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from awa_django.registry import Registry, registry


@pytest.fixture(autouse=True)
def isolated_hooks() -> Iterator[Registry]:
    """Hooks and follow-up builders a test registers never leak into the next test: the
    hook and builder lists (and the worker-started flag) are restored after every test."""
    before, builders = registry.hooks(), registry.follow_ups()
    yield registry
    registry.clear_hooks()
    for hook in before:
        registry.add_hook(hook)
    registry.clear_follow_ups()
    for builder in builders:
        registry.add_follow_up(builder)
    registry.mark_started(False)


@pytest.fixture
def clean_hooks(isolated_hooks: Registry) -> Registry:
    """Explicit name for tests that register hooks (isolation itself is automatic)."""
    return isolated_hooks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under pytest-xdist (`make test PYTEST_ARGS="-n 2"`: a process per core, each with its
    own test database), a test marked `exclusive` runs while no other process is inside a
    test: it restarts the server, or reads server-wide state that other tests move. The
    lock spans the test's whole protocol, setup and teardown included (pytest-django's
    flush of a transactional test writes too). The others share it; a turnstile lets a
    waiting exclusive test in before later shared ones, so it is never starved."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return (yield)
    run_dir = Path(item.config._tmp_path_factory.getbasetemp()).parent  # type: ignore[attr-defined]
    exclusive = item.get_closest_marker("exclusive") is not None
    with (
        open(run_dir / "awa-turnstile.lock", "a") as turnstile,
        open(run_dir / "awa-exclusive.lock", "a") as gate,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
