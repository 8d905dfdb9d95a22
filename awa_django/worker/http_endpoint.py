"""A small HTTP/1.1 server for the worker's metrics and health endpoint, safe to expose:
every request must arrive whole within a read timeout, connections are capped, and each
answer closes its connection.

It runs an asyncio loop on a thread of its own (never the worker's loop), so an idle or
half-sent connection costs a socket, not a thread. At the connection cap a new client
takes the place of the oldest one that has not finished sending its request (a client
that dribbles its headers cannot keep the others out); when every connection is being
answered, the new one is closed at once. A client that goes away before its answer is
one log line, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from http import HTTPStatus

logger = logging.getLogger("awa_django.worker")

READ_TIMEOUT_SECONDS = 5.0  # to send the request line and headers, whole
WRITE_TIMEOUT_SECONDS = 10.0  # to take the answer
MAX_CONNECTIONS = 256
MAX_REQUEST_BYTES = 8192  # request line and headers; no request here has a body
STOP_TIMEOUT_SECONDS = 2.0

Answer = tuple[int, str, bytes]  # status, content type, body
Responder = Callable[[str], Awaitable[Answer]]  # the path (with its query) → the answer


class EndpointServer:
    """Serves GET (and HEAD) requests on `host:port` with `respond`; port 0 picks a free
    port (see `.port`). The socket is bound at construction, so a port in use fails there."""

    def __init__(
        self,
        host: str,
        port: int,
        respond: Responder,
        *,
        read_timeout: float = READ_TIMEOUT_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.respond = respond
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family, backlog=128)
        self.address: tuple[str, int] = self._socket.getsockname()[:2]
        self.port = self.address[1]
        self.loop = asyncio.new_event_loop()
        # Connections still sending their request, oldest first (dicts keep order), and
        # the number of those being answered.
        self._reading: dict[asyncio.StreamWriter, None] = {}
        self._answering = 0
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="awa-health", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(STOP_TIMEOUT_SECONDS)

    def stop(self) -> None:
        if self._thread.is_alive() and self._stopped is not None:
            self.loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(STOP_TIMEOUT_SECONDS)
        elif self._thread.ident is None:  # never started: its loop never ran
            self.loop.close()
        self._socket.close()

    @property
    def open_connections(self) -> int:
        return len(self._reading) + self._answering

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(
            self._connection, sock=self._socket, limit=MAX_REQUEST_BYTES
        )
        self._ready.set()
        await self._stopped.wait()
        server.close()
        for writer in list(self._reading):
            writer.transport.abort()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._admit(writer):
            writer.transport.abort()
            return
        self._reading[writer] = None
        try:
            path = await self._read_request(reader, writer)
        finally:
            self._reading.pop(writer, None)
        if path is None:
            writer.close()  # after an error answer, if one was written
            return
        self._answering += 1
        try:
            await self._answer(path, writer)
        finally:
            self._answering -= 1
            writer.close()  # after what is buffered is sent

    def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Room for one more connection, made by closing the oldest one still sending its
        request when the cap is reached; False when all are being answered."""
        if self.open_connections < self.max_connections:
            return True
        if not self._reading:
            return False
        oldest = next(iter(self._reading))
        self._reading.pop(oldest)
        oldest.transport.abort()
        return True

    async def _read_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> str | None:
        """The path of a well-formed GET or HEAD request (a `HEAD ` prefix marks HEAD);
        None when the client went away, was too slow, or was answered with an error."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.read_timeout)
        except TimeoutError:
            return None  # idle or half-sent: the timeout is the whole answer
        except asyncio.IncompleteReadError as exc:
            # A bare connect and close (a TCP probe) is not worth a line, nor a connection
            # this server closed to make room.
            if exc.partial and writer in self._reading:
                _went_away(writer, "while sending its request")
            return None
        except asyncio.LimitOverrunError:
            await _send(writer, _error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE))
            return None
        except ConnectionError:
            if writer in self._reading:
                _went_away(writer, "while sending its request")
            return None
        method, _, rest = head.decode("latin-1").partition(" ")
        target = rest.partition(" ")[0]
        if method not in ("GET", "HEAD"):
            await _send(writer, _error(HTTPStatus.METHOD_NOT_ALLOWED))
            return None
        if not target.startswith("/"):
            await _send(writer, _error(HTTPStatus.BAD_REQUEST))
            return None
        return target if method == "GET" else f"HEAD {target}"

    async def _answer(self, request: str, writer: asyncio.StreamWriter) -> None:
        head_only = request.startswith("HEAD ")
        path = request.removeprefix("HEAD ")
        try:
            answer = await self.respond(path)
        except Exception:
            logger.exception("the metrics endpoint failed to answer %s", path[:100])
            answer = _error(HTTPStatus.INTERNAL_SERVER_ERROR)
        if writer.transport.is_closing():
            _went_away(writer, f"before the answer to {path[:100]}")
            return
        if not await _send(writer, answer, head_only=head_only):
            _went_away(writer, f"before the answer to {path[:100]} was sent")


async def _send(writer: asyncio.StreamWriter, answer: Answer, *, head_only: bool = False) -> bool:
    """Write `answer`; False when the client went away (or did not read) meanwhile."""
    status, content_type, body = answer
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("latin-1")
    try:
        writer.write(head if head_only else head + body)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_SECONDS)
    except (ConnectionError, TimeoutError):
        return False
    return True


def _error(status: HTTPStatus) -> Answer:
    return int(status), "text/plain; charset=utf-8", f"{status.phrase}\n".encode()


def _went_away(writer: asyncio.StreamWriter, when: str) -> None:
    peer = writer.get_extra_info("peername") or ("?", 0)
    logger.info("metrics endpoint: client %s:%s went away %s", peer[0], peer[1], when)
