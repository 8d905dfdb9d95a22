"""Measures each queue's depth, lag, dead letters, waiting children and jobs waiting
for a concurrency-key slot once for the whole fleet: the leader runs a few indexed queries
and publishes the figures through its own metrics endpoint, so no scrape of any worker
touches the jobs tables (decision 021)."""

from __future__ import annotations

from awa_django.storage.sql import keys as keys_sql
from awa_django.storage.sql import rollups as rollups_sql
from awa_django.worker.database import Database
from awa_django.worker.metrics import WorkerMetrics

INTERVAL = 15.0


class QueueDepth:
    def __init__(self, db: Database, metrics: WorkerMetrics, queues: list[str]) -> None:
        self.db = db
        self.metrics = metrics
        self.queues = queues  # reported at 0 when they have no available job

    async def run_once(self) -> dict[str, tuple[int, float]]:
        figures: dict[str, tuple[int, float]] = dict.fromkeys(self.queues, (0, 0.0))
        for figure in await self.db.run(rollups_sql.queue_depth_lag()):
            figures[figure.queue] = (figure.depth, figure.lag_seconds)
        self.metrics.set_queue_figures(figures)
        dead = dict.fromkeys(self.queues, 0) | await self.db.run(rollups_sql.dead_letter_depth())
        self.metrics.set_dead_letter_figures(dead)
        # Jobs waiting for a concurrency-key slot, per queue: aggregated, never per key.
        waiting = dict.fromkeys(self.queues, 0) | await self.db.run(keys_sql.key_waiting_by_queue())
        self.metrics.set_keys_waiting(waiting)
        children = await self.db.run(rollups_sql.queue_waiting_parents())
        self.metrics.set_waiting_parents_figures(dict.fromkeys(self.queues, 0) | children)
        return figures
