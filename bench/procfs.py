"""Process trees and CPU seconds from Linux /proc: which processes a worker consists of
(a `--processes N` supervisor puts its children in their own process groups), and how
much CPU they and their PostgreSQL backends used, to tell Python from database time."""

from __future__ import annotations

import os
from pathlib import Path

from django.db import connection

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (which may contain spaces): index 0
    is the state, 1 the parent pid, 11/12 utime/stime, 19 the start time."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def tree(root: int) -> dict[int, str]:
    """`root` and its live descendants, each with its start time (a pid's identity)."""
    parents: dict[int, int] = {}
    starts: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            parents[int(entry.name)], starts[int(entry.name)] = int(fields[1]), fields[19]
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found.update(children)
        frontier.extend(children)
    return {pid: starts[pid] for pid in found if pid in starts}


def same_process(pid: int, start: str) -> bool:
    """Still the process we saw (not exited, not a reused pid)."""
    fields = _stat(pid)
    return fields is not None and fields[19] == start and fields[0] != "Z"


def cpu_seconds(pids: list[int]) -> float:
    stats = [f for pid in pids if (f := _stat(pid))]
    return sum((int(f[11]) + int(f[12])) / _TICKS for f in stats)


def worker_cpu(root: int) -> float:
    """utime+stime of the worker process and its children (supervisor mode)."""
    return cpu_seconds(list(tree(root)))


def backend_cpu(application_prefix: str = "awa-worker") -> float | None:
    """utime+stime of the PostgreSQL backends serving the workers (same host only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
            [application_prefix + "%"],
        )
        pids = [row[0] for row in cursor.fetchall()]
    return cpu_seconds(pids) if pids else None
