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
    """`SELECT 1` on a dedicated connection, reconnecting after any failure."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        timeout_ms = PROBE_TIMEOUT_SECONDS * 1000
        options = f"{kwargs.get('options', '')} -c statement_timeout={timeout_ms}".strip()
        self.kwargs = {
            **kwargs,
            "connect_timeout": PROBE_TIMEOUT_SECONDS,
            "tcp_user_timeout": timeout_ms,
            "options": options,
            "application_name": f"{kwargs.get('application_name', 'awa-worker')} probe"[:63],
        }
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def run_once(self) -> str | None:
        """None when the database answered, else why not."""
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(**self.kwargs)
                self._conn.execute("SELECT 1")
                return None
            except psycopg.Error as exc:
                self.close()
                return f"database unreachable: {str(exc).strip()[:200]}"

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


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
