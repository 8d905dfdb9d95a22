"""System checks of the callback secrets: unsigned requests only under DEBUG (awa.E011), and
`check --deploy` warnings for a short (awa.W011) or published (awa.W012) secret."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core import checks

from awa_django.checks import (
    EXAMPLE_CALLBACK_SECRETS,
    MIN_CALLBACK_SECRET_BYTES,
    check_callback_secret_strength,
)
from testproject import settings as testproject_settings

ROOT = Path(__file__).resolve().parents[2]
STRONG = "9f2c1d7e0b4a8c3f6e5d2b1a0c9e8f7d6a5b4c3d2e1f0a9b"


def awa_ids(*, deploy: bool) -> list[str]:
    messages = checks.run_checks(tags=[checks.Tags.security], include_deployment_checks=deploy)
    return [m.id for m in messages if m.id and m.id.startswith("awa.")]


@pytest.mark.parametrize(("debug", "ids"), [(False, ["awa.E011"]), (True, [])])
def test_allowing_unsigned_requests_is_an_error_without_debug(settings, debug, ids):
    settings.DEBUG = debug
    settings.AWA = {"CALLBACK_ALLOW_UNSIGNED": True}
    assert awa_ids(deploy=False) == ids


@pytest.mark.parametrize(
    ("awa", "debug", "ordinary", "deploy"),
    [
        # Production: an error everywhere, once.
        ({}, False, ["awa.E010"], ["awa.E010"]),
        ({"CALLBACK_SECRET": ""}, False, ["awa.E010"], ["awa.E010"]),
        ({"CALLBACK_SECRETS": [""]}, False, ["awa.E010"], ["awa.E010"]),
        # A new project (DEBUG on, secret not exported): a warning that does not stop
        # migrate or the worker, and the error under --deploy.
        ({}, True, ["awa.W013"], ["awa.W013", "awa.E010"]),
        ({"CALLBACK_SECRETS": [""]}, True, ["awa.W013"], ["awa.W013", "awa.E010"]),
        ({"CALLBACK_SECRET": STRONG}, True, [], []),
    ],
)
def test_a_missing_or_empty_secret_is_reported_with_the_fix(settings, awa, debug, ordinary, deploy):
    settings.DEBUG = debug
    settings.AWA = awa
    assert awa_ids(deploy=False) == ordinary
    assert awa_ids(deploy=True) == deploy
    for message in checks.run_checks(tags=[checks.Tags.security], include_deployment_checks=True):
        if message.id in ("awa.E010", "awa.W013"):
            assert "AWA_CALLBACK_SECRET" in message.msg
            assert "export AWA_CALLBACK_SECRET=$(python -c" in (message.hint or "")
            assert "CALLBACK_ALLOW_UNSIGNED" in (message.hint or "")


def test_allowing_unsigned_requests_is_an_error_even_beside_a_secret(settings):
    # It has no effect while a secret is set, but unsetting the secret would open the door.
    settings.DEBUG = False
    settings.AWA = {"CALLBACK_ALLOW_UNSIGNED": True, "CALLBACK_SECRET": STRONG}
    assert awa_ids(deploy=False) == ["awa.E011"]


@pytest.mark.parametrize(
    ("awa", "ids"),
    [
        ({"CALLBACK_SECRET": STRONG}, []),
        ({"CALLBACK_SECRET": "x" * (MIN_CALLBACK_SECRET_BYTES - 1)}, ["awa.W011"]),
        ({"CALLBACK_SECRET": "x" * MIN_CALLBACK_SECRET_BYTES}, []),
        # Bytes, not characters: 11 three-byte characters are 33 bytes.
        ({"CALLBACK_SECRET": "€" * 11}, []),
        ({"CALLBACK_SECRET": testproject_settings.DEMO_CALLBACK_SECRET}, ["awa.W012"]),
        ({"CALLBACK_SECRETS": [STRONG, "short"]}, ["awa.W011"]),
        (
            {"CALLBACK_SECRETS": ["short", "dev-callback-secret-change-me"]},
            ["awa.W011", "awa.W012"],
        ),
    ],
)
def test_deploy_checks_warn_about_weak_or_published_secrets(settings, awa, ids):
    settings.AWA = awa
    assert awa_ids(deploy=True) == ids
    assert awa_ids(deploy=False) == []  # only `check --deploy` asks


def test_a_weak_rotation_entry_is_named_by_its_position(settings):
    settings.AWA = {"CALLBACK_SECRETS": [STRONG, "short"]}
    [warning] = check_callback_secret_strength()
    assert 'AWA["CALLBACK_SECRETS"][1]' in warning.msg
    assert "secrets.token_hex" in (warning.hint or "")


def test_the_example_project_defaults_are_flagged_under_deploy():
    # The demo runs with a published secret; a deployment that forgets to set one is warned.
    assert testproject_settings.AWA["CALLBACK_SECRET"] in EXAMPLE_CALLBACK_SECRETS
    assert "django.middleware.clickjacking.XFrameOptionsMiddleware" in (
        testproject_settings.MIDDLEWARE
    )


def test_every_secret_written_in_the_docs_is_a_known_example():
    # A literal secret in a settings example gets copied into real settings files.
    literal = re.compile(r"CALLBACK_SECRETS?\"?\]?\s*[:=]\s*\[?\s*\"([^\"]+)\"")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = {m.group(1) for page in pages for m in literal.finditer(page.read_text())}
    assert found <= EXAMPLE_CALLBACK_SECRETS, found - EXAMPLE_CALLBACK_SECRETS
