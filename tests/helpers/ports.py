"""Local ports for tests of what happens when nothing, or nobody useful, is at the other end.

`closed_port` is a 127.0.0.1 port nothing listens on (bound, then released: a connect is
refused). `silent_port` holds a listening socket that accepts connections (the kernel completes
the handshake) and never reads or answers, for as long as its context lasts.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def silent_port() -> Iterator[int]:
    """A local port that accepts connections and never answers, while the context lasts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])
