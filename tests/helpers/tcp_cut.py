"""A plain TCP forwarder that can cut a link: a network partition for one side of it.

`TcpCut(target)` listens on a free loopback port and forwards every connection, byte for
byte, to `target` (HOST:PORT). It knows nothing of the protocol, so it fits ZooKeeper as
well as Kafka. `cut()` closes every forwarded connection (both ends) and stops listening,
so new connections are refused until `heal()` listens again on the same port. Point one
broker's `zookeeper.connect` at it to cut that broker from ZooKeeper, or make it a broker's
`advertised.listeners` to cut that broker from its peers and from clients that found it
through Metadata (its own listener stays reachable for a test that dials it directly).

Threads, not asyncio: one accept thread, two pump threads per connection, all daemons.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

__all__ = ["TcpCut"]

ACCEPT_POLL_S = 0.05
CHUNK = 65536


class TcpCut:
    def __init__(self, target: str, host: str = "127.0.0.1", port: int = 0) -> None:
        target_host, _, target_port = target.rpartition(":")
        self.target = (target_host, int(target_port))
        self.host = host
        self.port = port
        self.accepted = 0  # connections forwarded, over all listening periods
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._listener is None

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> TcpCut:
        """Listen (again, on the same port after a cut) and forward."""
        if self._listener is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        self.port = int(listener.getsockname()[1])
        self._listener = listener
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._accept_loop, args=(listener, self._stop), daemon=True
        )
        self._thread.start()
        return self

    heal = start

    def cut(self) -> None:
        """Close every forwarded connection and refuse new ones until `heal()`."""
        listener, self._listener = self._listener, None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if listener is not None:
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            _abort(s)

    def close(self) -> None:
        self.cut()

    def __enter__(self) -> TcpCut:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "cut" if self.is_cut else "forwarding"
        return f"TcpCut({self.address} -> {self.target[0]}:{self.target[1]}, {state})"

    # ---- forwarding ------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket, stop: threading.Event) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(listener, selectors.EVENT_READ)
            while not stop.is_set():
                if not sel.select(ACCEPT_POLL_S):
                    continue
                try:
                    client, _ = listener.accept()
                except OSError:
                    continue
                if stop.is_set():
                    _abort(client)
                    break
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                    upstream.settimeout(None)
                except OSError:
                    _abort(client)  # the target is down: so is the link
                    continue
                with self._lock:
                    if stop.is_set():
                        _abort(client)
                        _abort(upstream)
                        break
                    self._sockets |= {client, upstream}
                    self.accepted += 1
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(CHUNK)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # One side closed: close both, as a dropped link would.
            with self._lock:
                self._sockets -= {src, dst}
            _abort(src)
            _abort(dst)


def _abort(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
