"""Benchmark entry point: `.venv/bin/python bench/run.py [--jobs N] [--runs K] [--scenario S]`.

Drops and recreates its own database (`awa_bench`, or `AWA_BENCH_DATABASE_URL`), migrates
it, and prints one JSON line per scenario and run plus a median line per scenario.
See bench/README.md for what each scenario measures.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from bench.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
