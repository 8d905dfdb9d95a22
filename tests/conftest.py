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


@pytest.fixture(autouse=True)
def exclusive_under_xdist(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under pytest-xdist (`make test` runs a worker per core, each with its own test
    database), a test marked `exclusive` runs while no other worker is inside a test: it
    restarts the server or otherwise needs the whole cluster. The others share a lock; a
    turnstile lets a waiting exclusive test in before later shared ones (no starvation)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    run_dir = Path(tmp_path_factory.getbasetemp()).parent  # shared by this run's workers
    exclusive = request.node.get_closest_marker("exclusive") is not None
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
            yield
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
