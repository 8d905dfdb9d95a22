"""The worker's HTTP endpoint: `GET /metrics` (Prometheus text), `GET /healthz` (the
process is alive) and `GET /readyz` (database reachable, dispatcher and heartbeat loops
alive, not draining; else 503 with a JSON reason). Awa §8.21; docs/operations.md.

It runs in a thread of its own (the standard library's threading HTTP server), off the
event loop: a scrape or a probe never delays a claim, and a blocked loop still answers.
The database check uses its own connection with a short timeout, so a probe costs one
`SELECT 1` and never waits on the worker's pool.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg

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
    """Serves the three paths on `host:port` (port 0: any free port, see `.port`)."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: WorkerMetrics,
        readiness: Callable[[], str | None],
    ) -> None:
        self.metrics = metrics
        self.readiness = readiness
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="awa-health", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        logger.info("metrics and health on http://%s:%d/", *self._server.server_address[:2])

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever() to end
            self._server.shutdown()
        self._server.server_close()

    def respond(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`."""
        route = path.split("?", 1)[0]
        if route == "/metrics" and self.metrics.registry is not None:
            return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics.render()
        if route == "/healthz":
            return _json(200, {"status": "ok"})
        if route == "/readyz":
            reason = self.readiness()
            if reason is None:
                return _json(200, {"status": "ready"})
            return _json(503, {"status": "unavailable", "reason": reason})
        return _json(404, {"error": f"no such path: {route[:100]}"})


def _json(status: int, document: dict[str, str]) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(document).encode()


def _handler(server: HealthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, content_type, body = server.respond(self.path)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # probes every few seconds would flood the worker's log

    return Handler
