"""The worker endpoint's HTTP server on its own (worker/http_endpoint.py): what it answers
to requests it does not serve, HEAD, and its connection cap. Loopback sockets only."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from awa_django.worker.http_endpoint import MAX_REQUEST_BYTES, EndpointServer


async def _hello(path: str) -> tuple[int, str, bytes]:
    return 200, "text/plain", f"hello {path}".encode()


@pytest.fixture
def server() -> Iterator[EndpointServer]:
    endpoint = EndpointServer("127.0.0.1", 0, _hello, read_timeout=2.0, max_connections=4)
    endpoint.start()
    yield endpoint
    endpoint.stop()


def exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(request)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    return received


def closed(conn: socket.socket) -> bool:
    """The server closed `conn` (an end of stream, or a reset)."""
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_get_is_answered_and_the_connection_closed(server: EndpointServer) -> None:
    answer = exchange(server.port, b"GET /metrics?x=1 HTTP/1.1\r\nHost: h\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Connection: close" in head and b"Content-Length: 18" in head
    assert body == b"hello /metrics?x=1"


def test_head_has_no_body_and_other_methods_are_refused(server: EndpointServer) -> None:
    head = exchange(server.port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")
    assert exchange(server.port, b"POST /metrics HTTP/1.1\r\n\r\n").startswith(
        b"HTTP/1.1 405 Method Not Allowed"
    )
    assert exchange(server.port, b"GET metrics HTTP/1.1\r\n\r\n").startswith(
        b"HTTP/1.1 400 Bad Request"
    )


def test_a_request_head_over_the_limit_is_refused(server: EndpointServer) -> None:
    huge = b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * (MAX_REQUEST_BYTES * 2) + b"\r\n\r\n"
    assert exchange(server.port, huge).startswith(b"HTTP/1.1 431")


def test_at_the_cap_a_new_client_takes_the_place_of_the_oldest_dribbler(
    server: EndpointServer,
) -> None:
    dribblers = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
    try:
        for conn in dribblers:
            conn.sendall(b"GET / HTTP/1.1\r\n")  # never finished
        assert exchange(server.port, b"GET /x HTTP/1.1\r\n\r\n").endswith(b"hello /x")
        dribblers[0].settimeout(5)
        assert closed(dribblers[0])  # the oldest was closed to make room
        dribblers[3].settimeout(0.2)
        with pytest.raises(TimeoutError):  # the newest still waits for its request
            dribblers[3].recv(1)
    finally:
        for conn in dribblers:
            conn.close()
