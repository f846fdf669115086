"""Bounded graceful shutdown of ``modelcompare serve``.

On SIGTERM (or Ctrl-C) the server stops accepting connections and ``Shutdown.begin`` runs at once:
requests waiting with ``?wait=true`` answer 202 ``"processed": false`` (the chunk is queued and
stays durable), websockets close with 1012 (service restart), and the in-process worker stops
after its current update. Requests still running get what is left of ``shutdown_timeout`` seconds
(uvicorn's ``timeout_graceful_shutdown``), then are cancelled; the in-process worker gets what is
left of the same bound, after which the process exits without it (an interrupted update is
recomputed from the stream, bit-identically: nothing acknowledged is lost). So the process exits
within ``MODELCOMPARE_SHUTDOWN_TIMEOUT`` seconds plus the embedded Redis' own shutdown.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI

from modelcompare.service.api.http import server_config
from modelcompare.service.core.config import Settings


class Shutdown:
    """The shutdown deadline, and what to tell when it starts (idempotent)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline: float | None = None
        self._callbacks: list[Callable[[], None]] = []

    def on_begin(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def begin(self) -> None:
        if self.deadline is not None:
            return
        self.deadline = time.monotonic() + self.timeout
        for callback in self._callbacks:
            callback()

    def remaining(self) -> float:
        """Seconds left of the bound (all of it when shutdown started some other way)."""
        if self.deadline is None:
            return self.timeout
        return max(self.deadline - time.monotonic(), 0.0)


class GracefulServer(uvicorn.Server):
    """uvicorn's server, telling the app when shutdown starts, before in-flight requests drain
    (uvicorn's own lifespan event comes only after they have)."""

    def __init__(self, config: uvicorn.Config, shutdown: Shutdown) -> None:
        super().__init__(config)
        self.app_shutdown = shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.app_shutdown.begin()
        await super().shutdown(sockets)


def serve(app: FastAPI, settings: Settings, log_level: str) -> None:
    """Run ``app`` with the HTTP limits of ``settings`` (service/api/http.py) until SIGTERM."""
    GracefulServer(server_config(app, settings, log_level), app.state.shutdown).run()
