"""Shared fixtures. Every test runs against a real PostgreSQL (DATABASE_URL)."""

from __future__ import annotations

import pytest

from awa_django.registry import registry


@pytest.fixture
def clean_hooks():
    """Hooks registered by a test are removed afterwards."""
    before = registry.hooks()
    yield registry
    registry.clear_hooks()
    for hook in before:
        registry.add_hook(hook)
