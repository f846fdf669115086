"""A TCP proxy in front of Redis that loses replies: for chosen commands it lets the command
through, waits for Redis's answer (so the command ran), then closes the client's connection
instead of passing the answer on: what a network fault between the API and Redis does.

Used by tests/service/store/test_lost_replies.py and benchmarks/lost_replies.py.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class DropRule:
    """Lose the reply to every ``every``-th command whose bytes contain ``marker`` (counting
    from 1, so the first loss is at ``every``), at most ``limit`` times."""

    marker: bytes
    every: int
    limit: int
    seen: int = 0
    dropped: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, data: bytes) -> bool:
        if self.marker not in data:
            return False
        with self.lock:
            self.seen += 1
            if self.dropped < self.limit and self.seen % self.every == 0:
                self.dropped += 1
                return True
        return False


class ReplyDropper:
    """Listens on a free loopback port and forwards to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int], rule: DropRule) -> None:
        self.upstream = upstream
        self.rule = rule
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            lose_next = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, lose_next),
                             daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, lose_next),
                             daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket,
                  lose_next: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(1 << 16):
                if self.rule.take(data):
                    lose_next.set()  # before the command leaves: its reply cannot overtake it
                server.sendall(data)
        _close(client, server)

    def _replies(self, server: socket.socket, client: socket.socket,
                 lose_next: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(1 << 16):
                if lose_next.is_set():
                    break  # the command ran; its answer is lost with the connection
                client.sendall(data)
        _close(client, server)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
