"""Headless Chromium (Debian's `chromium`) driven by Playwright's sync API.

Tests here skip, with the install command in the reason, only when no Chromium binary is
installed. Playwright's own browser downloads are never used (`executable_path`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    found = os.environ.get("AWA_CHROMIUM") or shutil.which("chromium")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per test module, closed before the next module runs."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium installed: apt-get install -y chromium (Debian's package)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread, so Django's ORM
    # would refuse to run here ("async unsafe") although every call is synchronous. Allowed
    # only while the browser is open, so other modules keep Django's safety check.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(
                executable_path=executable, headless=True, args=CHROMIUM_ARGS
            )
            yield launched
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    yield opened
    context.close()


@pytest.fixture
def screenshot_dir(tmp_path: Path) -> Path:
    """Where the test saves screenshots: $AWA_SCREENSHOT_DIR or the test's tmp dir."""
    chosen = Path(os.environ.get("AWA_SCREENSHOT_DIR") or tmp_path)
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen
