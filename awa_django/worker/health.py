"""The worker's HTTP endpoint: `GET /metrics` (Prometheus text), `GET /healthz` (the
process is alive) and `GET /readyz` (database reachable, dispatcher and heartbeat loops
alive, not draining; else 503 with a JSON reason). Awa §8.21; docs/operations.md.

It runs on a thread of its own (worker/http_endpoint.py: read timeouts, a connection cap),
off the worker's event loop: a scrape or a probe never delays a claim, and a blocked loop
still answers. The database check uses its own connection with a short timeout, so a
probe costs one `SELECT 1` and never waits on the worker's pool.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import psycopg

from awa_django.worker.http_endpoint import EndpointServer
from awa_django.worker.metrics import WorkerMetrics

logger = logging.getLogger("awa_django.worker")

PROBE_TIMEOUT_SECONDS = 2


class DatabaseProbe:
    """`SELECT 1` on a fresh connection, given PROBE_TIMEOUT_SECONDS in all.

    A fresh connection per probe (a few milliseconds every few seconds) and a thread with
    a deadline: a database that stopped answering without closing anything (a dead network
    path) must turn the probe to 503, not hang it on a statement that never returns."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        name = f"{kwargs.get('application_name', 'awa-worker')} probe"[:63]
        self.kwargs = {**kwargs, "connect_timeout": PROBE_TIMEOUT_SECONDS, "application_name": name}

    def run_once(self) -> str | None:
        """None when the database answered in time, else why not."""
        answer: list[str | None] = []
        thread = threading.Thread(target=lambda: answer.append(self._select_one()), daemon=True)
        thread.start()
        thread.join(PROBE_TIMEOUT_SECONDS + 0.5)
        if not answer:
            return f"database unreachable: no answer within {PROBE_TIMEOUT_SECONDS}s"
        return answer[0]

    def _select_one(self) -> str | None:
        try:
            with psycopg.connect(**self.kwargs) as conn:
                conn.execute("SELECT 1")
            return None
        except psycopg.Error as exc:
            return f"database unreachable: {str(exc).strip()[:200]}"


class HealthServer:
    """Serves the three paths on `host:port` (port 0: any free port, see `.port`) through
    the bounded `EndpointServer`.

    `/healthz` is answered on the endpoint's loop at once. `/metrics` and `/readyz` are
    computed on threads of their own (a render takes milliseconds per thousand series; a
    probe can take PROBE_TIMEOUT_SECONDS), each shared by every request that arrives while
    it runs and reused for a short while after: two hundred concurrent scrapes cost one
    render, and neither path ever queues behind the other."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: WorkerMetrics,
        readiness: Callable[[], str | None],
    ) -> None:
        self.metrics = metrics
        self.readiness = readiness
        self._rendered = Shared(self._render, METRICS_MAX_AGE_SECONDS, "awa-metrics")
        self._ready = Shared(readiness, READINESS_MAX_AGE_SECONDS, "awa-readyz")
        self._server = EndpointServer(host, port, self.respond)
        self.port: int = self._server.port

    def start(self) -> None:
        self._server.start()
        host, port = self._server.address
        where = (
            " (all interfaces; --metrics-host 127.0.0.1 keeps it local)"
            if _everywhere(host)
            else ""
        )
        logger.info("metrics and health on http://%s:%d/%s", host, port, where)

    def stop(self) -> None:
        self._server.stop()
        self._rendered.close()
        self._ready.close()

    async def respond(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`."""
        route = path.split("?", 1)[0]
        if route == "/metrics" and self.metrics.registry is not None:
            return 200, "text/plain; version=0.0.4; charset=utf-8", await self._rendered.get()
        if route == "/healthz":
            return _json(200, {"status": "ok"})
        if route == "/readyz":
            reason = await self._ready.get()
            if reason is None:
                return _json(200, {"status": "ready"})
            return _json(503, {"status": "unavailable", "reason": reason})
        return _json(404, {"error": f"no such path: {route[:100]}"})

    def _render(self) -> bytes:
        return self.metrics.render()


# A scrape sees figures at most this old; scrapers poll every 15 s or more.
METRICS_MAX_AGE_SECONDS = 1.0
# A probe's answer is not kept once given: requests that arrive while a probe runs share
# it, which is what a burst of orchestrators' probes needs, and the next request probes
# afresh, so a database outage shorter than a second still reads as 503 to whoever asks.
READINESS_MAX_AGE_SECONDS = 0.0

T = TypeVar("T")


class Shared(Generic[T]):
    """A value computed on a thread of its own, by one call at a time: callers that ask
    while it is computed wait for that computation, and a value younger than `max_age` is
    handed out as it is. Used from the endpoint's loop only, so it needs no lock."""

    def __init__(self, compute: Callable[[], T], max_age: float, name: str) -> None:
        self.compute = compute
        self.max_age = max_age
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._value: tuple[float, T] | None = None
        self._running: asyncio.Future[T] | None = None

    async def get(self) -> T:
        if self._value is not None and time.monotonic() - self._value[0] < self.max_age:
            return self._value[1]
        if self._running is None:
            self._running = asyncio.get_running_loop().run_in_executor(self._pool, self.compute)
            self._running.add_done_callback(self._keep)
        return await asyncio.shield(self._running)

    def _keep(self, done: asyncio.Future[T]) -> None:
        self._running = None
        if not done.cancelled() and done.exception() is None:
            self._value = (time.monotonic(), done.result())

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _everywhere(host: str) -> bool:
    return host in ("0.0.0.0", "::", "")


def _json(status: int, document: dict[str, str]) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(document).encode()
