"""Vacuums the queue's own tables where PostgreSQL's autovacuum will not (decision 027).

Every claim and every finished attempt leaves a dead row version in `awa_jobs_hot` and in
`awa_active_leases`. Autovacuum normally reclaims them; a server with `autovacuum = off`
(or a table with `autovacuum_enabled = false`) never does, and then the dispatch index and
the tables grow without bound and every claim slows (docs/performance.md measured a drain
falling to a sixth within four minutes). The leader therefore vacuums those tables itself,
and only those: where autovacuum runs, this does nothing.

A table is due when its dead rows exceed DEAD_ROWS + DEAD_FRACTION * live rows beyond what
the reclaimer's last VACUUM of it had to leave, or when that VACUUM had to leave that many
and the oldest running transaction has moved on since. While an old snapshot holds the
horizon VACUUM can remove nothing, and vacuuming again and again would only burn I/O; once
that transaction ends, its leftovers become removable and the table is due again. The
VACUUM runs in the background on a connection of its own, so promotion and rescue never
wait behind it; a new one starts only when the last has finished.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from psycopg import sql

from awa_django.storage.sql import maintenance as maintenance_sql
from awa_django.storage.sql.maintenance import TableDeadRows
from awa_django.worker.database import TRANSIENT_ERRORS, Database

logger = logging.getLogger("awa_django.worker")

INTERVAL = 30.0
DEAD_ROWS = 10_000
DEAD_FRACTION = 0.1
# Every table the worker writes on its hot path or on every tick.
TABLES = (
    "awa_jobs_hot",
    "awa_active_leases",
    "awa_queue_state",
    "awa_rate_buckets",
    "awa_worker_instances",
    "awa_leader_lease",
)


class Reclaimer:
    def __init__(self, db: Database) -> None:
        self.db = db
        # Per table: the dead rows our last VACUUM left, and the oldest running xid then.
        self.left: dict[str, tuple[int, int]] = {}
        self.task: asyncio.Task[None] | None = None

    async def run_once(self) -> list[str]:
        """Start vacuuming the tables that are due; returns their names."""
        if self.task is not None and not self.task.done():
            return []
        stats = await self.db.run(maintenance_sql.tables_autovacuum_skips(tables=TABLES))
        due = [row for row in stats if self._due(row)]
        if due:
            self.task = asyncio.create_task(self._vacuum(due))
        return [row.table for row in due]

    def _due(self, row: TableDeadRows) -> bool:
        worth = DEAD_ROWS + DEAD_FRACTION * row.live
        left, oldest_then = self.left.get(row.table, (0, 0))
        return row.dead - left > worth or (left > worth and row.oldest_xid > oldest_then)

    async def _vacuum(self, due: list[TableDeadRows]) -> None:
        tables = [row.table for row in due]
        try:
            async with await psycopg.AsyncConnection.connect(**self.db.kwargs) as conn:
                for table in tables:
                    statement = sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table))
                    await conn.execute(statement)
                stats = await maintenance_sql.tables_autovacuum_skips(tables=tables).arun(conn)
        except TRANSIENT_ERRORS as exc:
            logger.warning("vacuuming %s failed: %s", ", ".join(tables), exc)
            return
        except psycopg.Error as exc:  # no privilege, say: autovacuum's job is left undone
            logger.warning("cannot vacuum %s: %s", ", ".join(tables), exc)
            return
        oldest = {row.table: row.oldest_xid for row in due}
        self.left.update((row.table, (row.dead, oldest[row.table])) for row in stats)
        logger.info("vacuumed %s (autovacuum is off for them)", ", ".join(tables))
