"""Waiting on a condition, never out a fixed window: one poll loop for every test."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until[T](predicate: Callable[[], T | None], timeout: float = 20, what: str = "") -> T:
    """Poll `predicate` until it is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
