"""Command line of `bench/run.py`: pick scenarios, run each K times, print JSON lines.

One line per scenario and run, then one summary line per scenario with the median over
runs. A scenario that fails prints an `error` line and the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import traceback
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from .scenarios import GROUPS, SCENARIOS

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000, help="drain/enqueue_many/floor size")
    parser.add_argument("--enqueue-jobs", type=int, default=2_000, help="enqueue_one size")
    parser.add_argument("--pickup-jobs", type=int, default=200)
    parser.add_argument("--pickup-interval-ms", type=float, default=20.0)
    parser.add_argument("--bulk-jobs", type=int, default=1_000_000, help="bulk_retry size")
    parser.add_argument(
        "--bulk-rate", type=float, default=2_000.0, help="bulk_retry_paced's max_per_second"
    )
    parser.add_argument(
        "--deep-rows", type=int, default=1_000_000, help="drain_deep/drain_pruning ballast"
    )
    parser.add_argument(
        "--promote-rows", type=int, default=10_000_000, help="promote_deep's scheduled rows"
    )
    parser.add_argument(
        "--promote-seconds", type=float, default=60.0, help="promote_deep: seconds of due jobs"
    )
    parser.add_argument("--soak-minutes", type=int, default=30)
    parser.add_argument("--soak-rate", type=float, default=1000.0, help="soak: jobs/s offered")
    parser.add_argument(
        "--concurrency", type=int, default=10, help="drain scenarios: each worker process's slots"
    )
    parser.add_argument(
        "--flows", type=int, default=10_000, help="fan_in's parents, chains' chains of three"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--profile-dir",
        type=Path,
        help="py-spy (PY_SPY or PATH) the drain workers; collapsed stacks land here",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[*SCENARIOS, *GROUPS],
        help="repeatable; default: all",
    )
    return parser.parse_args(argv)


def selected(names: list[str] | None) -> list[str]:
    from .scenarios import GROUPS

    chosen: list[str] = []
    for name in names or ["all"]:
        for scenario in GROUPS.get(name, [name]):
            if scenario not in chosen:
                chosen.append(scenario)
    return chosen


def emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def machine_facts() -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server_version = cursor.fetchone()[0]
        cursor.execute("SELECT current_database()")
        database = cursor.fetchone()[0]
        # Figures that move the results by integer factors on long runs: without
        # autovacuum nothing reclaims dead tuples and a steady drain slows as they pile up.
        cursor.execute(
            "SELECT name, setting FROM pg_settings"
            " WHERE name IN ('autovacuum', 'fsync', 'synchronous_commit', 'shared_buffers')"
        )
        server_settings = dict(cursor.fetchall())
    load = os.getloadavg()
    return {
        "meta": "machine",
        "cpus": os.cpu_count(),
        "loadavg_1m_at_start": round(load[0], 2),
        "postgresql": server_version,
        "settings": server_settings,
        "database": database,
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from . import database
    from .scenarios import SCENARIOS, Options
    from .stats import summarize

    database.recreate()
    emit(machine_facts())
    options = Options(
        jobs=args.jobs,
        enqueue_jobs=args.enqueue_jobs,
        pickup_jobs=args.pickup_jobs,
        pickup_interval=args.pickup_interval_ms / 1000,
        bulk_jobs=args.bulk_jobs,
        bulk_rate=args.bulk_rate,
        deep_rows=args.deep_rows,
        promote_rows=args.promote_rows,
        promote_seconds=args.promote_seconds,
        soak_minutes=args.soak_minutes,
        soak_rate=args.soak_rate,
        profile_dir=args.profile_dir,
        concurrency=args.concurrency,
        flows=args.flows,
    )
    summaries, failed = [], False
    for name in selected(args.scenario):
        runs = run_scenario(name, SCENARIOS[name], options, args.runs)
        failed |= len(runs) < args.runs
        if runs:
            summaries.append(summarize(name, runs))
    for summary in summaries:
        emit(summary)
    return 1 if failed else 0


def run_scenario(name: str, scenario: Any, options: Any, runs: int) -> list[dict[str, Any]]:
    """K runs of one scenario. A failed run is reported and tried once more (another
    process may have restarted the server); a second failure abandons the scenario."""
    results: list[dict[str, Any]] = []
    for run in range(1, runs + 1):
        for attempt in (1, 2):
            print(f"[bench] {name} run {run}/{runs} (attempt {attempt})", file=sys.stderr)
            line = measure(name, run, scenario, options)
            emit(line)
            if "error" not in line:
                results.append(line)
                break
        else:
            return results
    return results


def measure(name: str, run: int, scenario: Any, options: Any) -> dict[str, Any]:
    from django.db import connection

    from . import database

    try:
        # Other work on the machine, or an old transaction anywhere in the cluster, skews
        # the figures: record both so such runs can be told apart.
        load, horizon = round(os.getloadavg()[0], 2), database.horizon_age()
        figures = scenario(options)
        horizon = max(horizon, database.horizon_age())
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        connection.close()  # a broken connection must not fail the runs that follow
        return {"scenario": name, "run": run, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "scenario": name,
        "run": run,
        **figures,
        "loadavg_1m": load,
        "oldest_other_xact_s": horizon,
    }
