#!/usr/bin/env bash
# Make sure .venv exists with Python >= 3.12 and holds the project with its `dev` extra.
# Idempotent: reinstalls only when pyproject.toml changed since the last install.
# Override the interpreter with PYTHON=/path/to/python3.x, the folder with VENV=path.
# `bootstrap.sh --find-python` only prints the interpreter it would use.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
STAMP="$VENV/.awa-dev-installed"

version_ok() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1
}

# pyenv shims can exist for a version that is not selected (they then fail), so each
# candidate is run, not just found on PATH.
find_python() {
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}" candidate
    for candidate in ${PYTHON:-} python3.13 python3.12 \
        /root/.pyenv/versions/3.13.0/bin/python3.13 /root/.pyenv/versions/3.12.1/bin/python3.12 \
        "$pyenv_root"/versions/3.1[3-9]*/bin/python3 "$pyenv_root"/versions/3.12*/bin/python3 \
        python3; do
        if command -v "$candidate" >/dev/null 2>&1 && version_ok "$candidate"; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if [ "${1:-}" = "--find-python" ]; then  # report the interpreter a new venv would use
    find_python
    exit
fi

if [ ! -x "$VENV/bin/python" ]; then
    if ! python="$(find_python)"; then
        echo "bootstrap: no Python >= 3.12 found (tried python3.13, python3.12, pyenv" \
            "versions, python3). Install one or run with PYTHON=/path/to/python3.12." >&2
        exit 1
    fi
    echo "bootstrap: creating $VENV with $python ($("$python" --version 2>&1))"
    "$python" -m venv "$VENV"
elif ! version_ok "$VENV/bin/python"; then
    echo "bootstrap: $VENV uses Python < 3.12; remove it (rm -rf $VENV) and run again." >&2
    exit 1
fi

wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$wanted" ]; then
    echo "bootstrap: pip install -e '.[dev]' into $VENV"
    started=$SECONDS
    "$VENV/bin/python" -m pip install --quiet -e '.[dev]'
    echo "$wanted" >"$STAMP"
    echo "bootstrap: installed in $((SECONDS - started)) s"
fi
