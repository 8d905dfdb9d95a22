"""Shared fixtures. Every test runs against a real PostgreSQL (DATABASE_URL)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.db.backends.postgresql.operations import DatabaseOperations
from django.test import override_settings

from awa_django.registry import Registry, registry

# The tables of a flush that hold anything at all: a heap page, live or dead. A table
# TRUNCATE left empty has none until a row (even one rolled back) is written to it.
WRITTEN_TABLES = """
SELECT t FROM unnest(%s::text[]) AS t JOIN pg_class c ON c.oid = to_regclass(quote_ident(t))
WHERE c.relkind <> 'r' OR pg_relation_size(c.oid) > 0
"""


@pytest.fixture(scope="session", autouse=True)
def flush_written_tables_only() -> Iterator[None]:
    """A transactional test's teardown (Django's `flush`) truncates only the tables that
    have a page on disk, with CASCADE for the empty tables that reference them: every other
    table is already what TRUNCATE would leave (no rows, live or dead; sequences are not
    reset either way). Truncating all ~35 tables took most of each transactional test's
    teardown (about 0.2 s on an idle machine, over 0.5 s loaded; some 700 tests)."""
    django_sql_flush = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: Sequence[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences:  # the sequences of every table, as Django would
            return django_sql_flush(
                self, style, tables, reset_sequences=True, allow_cascade=allow_cascade
            )
        with self.connection.cursor() as cursor:
            cursor.execute(WRITTEN_TABLES, [list(tables)])
            written = [row[0] for row in cursor.fetchall()]
        return django_sql_flush(self, style, written, allow_cascade=True)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing() -> Iterator[None]:
    """Users made by tests (admin_client, operators) are hashed with MD5, not Django's
    PBKDF2 of 1.5 million rounds (about a second of CPU per user, some 300 tests): no test
    is about password strength, and logging in still checks the password it was given."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


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
