"""devtools/wheel_check.py's package-data comparison: a wheel missing a template, a static
file or a migration of the source tree is refused by name (CI builds the real wheel)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.unit.test_pgenv import load

if TYPE_CHECKING:  # mypy reads the scripts as the namespace package `devtools`
    from devtools import wheel_check
else:
    wheel_check = load("wheel_check")


def source_data_files() -> list[str]:
    root = wheel_check.ROOT
    return [
        path.relative_to(root).as_posix()
        for folder in wheel_check.PACKAGE_DATA
        for path in (root / "awa_django" / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ] + ["awa_django/py.typed"]


def wheel_with(tmp_path: Path, names: list[str]) -> Path:
    wheel = tmp_path / "awa_django-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in names:
            archive.writestr(name, "")
    return wheel


def test_a_complete_wheel_passes_and_names_its_templates_and_static_files(tmp_path):
    templates, statics = wheel_check.shipped(wheel_with(tmp_path, source_data_files()))
    assert "admin/awa_django/dashboard.html" in templates
    assert "awa_django/admin.css" in statics


@pytest.mark.parametrize("kind", ["templates/", "static/", "migrations/0001"])
def test_a_wheel_missing_a_data_file_is_refused_by_name(tmp_path, kind):
    files = source_data_files()
    dropped = next(name for name in files if kind in name)
    with pytest.raises(RuntimeError, match=dropped):
        wheel_check.shipped(wheel_with(tmp_path, [n for n in files if n != dropped]))
