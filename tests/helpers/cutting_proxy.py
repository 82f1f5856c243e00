"""A TCP proxy to a test server that can cut every open connection at once, as a network would.

The browser talks to the proxy; `cut()` shuts down both ends of every connection it carries, so
the page sees its stream die without the server ending it, and whatever the browser opens next
(an EventSource's own reconnect) goes through to the server again. It notes the head of each
request it carries (`request_heads`): Chromium adds some headers, Last-Event-ID among them, below
the layer whose requests Playwright reports. Threads, not Trio: the browser tests drive
Playwright's sync API outside any event loop. Binds 127.0.0.1 only.
"""

from __future__ import annotations

import re
import socket
import threading
from types import TracebackType

ACCEPT_POLL = 0.05  # seconds: how soon `close()` stops the accepting thread
REQUEST_LINE = re.compile(rb"(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) \S+ HTTP/1\.[01]\r\n")


class CuttingProxy:
    """Forwards each connection to 127.0.0.1:`target_port`; use as a context manager."""

    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(ACCEPT_POLL)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self.connections = 0  # accepted so far
        self.request_heads: list[str] = []  # request line and headers of each request seen
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._acceptor = threading.Thread(target=self._accept, name="cutting-proxy", daemon=True)
        self._acceptor.start()

    def cut(self) -> int:
        """Shut down every open connection (both directions, both sides); returns how many."""
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            _shutdown(sock)
        return len(sockets) // 2

    def close(self) -> None:
        """Stop accepting, cut what is open, wait for the accepting thread."""
        with self._lock:
            self._closed = True
        self._acceptor.join()
        self._listener.close()
        self.cut()

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
                self.connections += 1
            for source, sink, requests in ((client, upstream, True), (upstream, client, False)):
                pump = threading.Thread(
                    target=self._pump, args=(source, sink, requests), daemon=True
                )
                pump.start()

    def _pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        """Copy one direction until either side ends; then end both (the pair's other pump
        wakes from its recv on the shutdown and closes too)."""
        try:
            while data := source.recv(65536):
                if requests and REQUEST_LINE.match(data):  # Chromium writes a head at once
                    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
                    with self._lock:
                        self.request_heads.append(head)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                _shutdown(sock)
            with self._lock:
                self._open.difference_update((source, sink))
            source.close()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # not connected any more, or closed already
        pass
