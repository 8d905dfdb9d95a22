"""A loopback TCP forwarder a test controls, to make the database stop answering.

    with TcpProxy(target_port=5432) as proxy:   # listens on 127.0.0.1:proxy.port
        ...                                     # bytes flow both ways
        proxy.blackhole()                       # bytes stop, sockets stay open: peers hang

A blackholed proxy neither forwards nor closes anything, so a client sees neither an error
nor a reset, only silence: what a dead network path or a frozen server looks like. New
connections are accepted and hang the same way. Every thread is a daemon, loops in short
bounded waits and ends on `stop()` (also on leaving the `with` block).
"""

from __future__ import annotations

import contextlib
import ipaddress
import select
import socket
import threading
from types import TracebackType

TICK = 0.05  # every loop re-checks the stop and blackhole flags this often


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        if not ipaddress.ip_address(target_host).is_loopback:
            raise ValueError(f"TcpProxy forwards to loopback addresses only, not {target_host}")
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(TICK)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.connections = 0
        # Client sockets that sent bytes into the blackhole: statements now hanging.
        self.stalled: set[int] = set()
        self._spawn(self._accept_loop, "tcp-proxy-accept")

    # -- control ---------------------------------------------------------------------------
    def blackhole(self) -> None:
        """Stop moving bytes in both directions; keep every socket open."""
        self._forwarding.clear()

    def restore(self) -> None:
        self._forwarding.set()

    def stop(self, timeout: float = 5.0) -> None:
        """End every thread and close every socket; raises if a thread outlives `timeout`."""
        self._stop.set()
        for thread in list(self.threads):
            thread.join(timeout=timeout)
        with self._lock:
            for sock in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.close()
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"proxy threads still running: {alive}")

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- threads ---------------------------------------------------------------------------
    def _spawn(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        self.threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            self._spawn(self._pump, f"tcp-proxy-{self.connections}", client, upstream)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        peer = {client: upstream, upstream: client}
        for sock in peer:
            sock.settimeout(5)  # a sendall into a stuck peer must not hang the thread
        while not self._stop.is_set():
            if not self._forwarding.is_set():
                # Silence: read nothing, close nothing; only note a client left waiting.
                waiting, _, _ = select.select([client], [], [], TICK)
                if waiting:
                    with self._lock:
                        self.stalled.add(client.fileno())
                continue
            readable, _, _ = select.select(list(peer), [], [], TICK)
            for sock in readable:
                try:
                    data = sock.recv(65536)
                    if not data:
                        raise ConnectionError("closed")
                    peer[sock].sendall(data)
                except OSError:
                    for each in peer:
                        with contextlib.suppress(OSError):
                            each.close()
                    return
