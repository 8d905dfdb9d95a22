"""Shared fixtures. Every test runs against a real PostgreSQL (DATABASE_URL)."""

from __future__ import annotations

from collections.abc import Iterator

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
