"""CPU seconds spent by a worker's process group and by its PostgreSQL backends (Linux
/proc), so a drain shows whether Python or the database is the bottleneck."""

from __future__ import annotations

import os
from pathlib import Path

from django.db import connection

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after it start past ")".
    return text[text.rindex(")") + 2 :].split()


def _cpu_seconds(fields: list[str]) -> float:
    # utime and stime are fields 14 and 15 of /proc/PID/stat (11 and 12 after the name).
    return (int(fields[11]) + int(fields[12])) / _TICKS


def process_group_cpu(pgid: int) -> float | None:
    """utime+stime of every live process in group `pgid` (the worker and its children)."""
    if not Path("/proc").is_dir():
        return None
    stats = (_stat_fields(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit())
    # Field 5 of /proc/PID/stat (index 2 after the name) is the process group.
    return sum(_cpu_seconds(f) for f in stats if f and int(f[2]) == pgid)


def backend_cpu(application_prefix: str = "awa-worker") -> float | None:
    """utime+stime of the PostgreSQL backends serving the workers (same host only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
            [application_prefix + "%"],
        )
        pids = [row[0] for row in cursor.fetchall()]
    seen = [f for pid in pids if (f := _stat_fields(pid))]
    return sum(_cpu_seconds(f) for f in seen) if seen else None
