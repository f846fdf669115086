"""The HTTP server's limits (docs/guide/limits.md): header size, keep-alive and request-read
timeouts, a connection cap that evicts idle connections first. ``server_config`` is what
``modelcompare serve`` runs uvicorn with, its access log keeping API keys out
(``RedactQueryTokens``)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.core.config import Settings


class ReadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with two limits.

    Request-read timeout: a connection whose request (line, headers and body) has not fully
    arrived ``read_timeout`` seconds after it opened or the previous response ended is closed,
    so a client that connects and sends nothing, or a byte a minute, holds it that long at most
    (uvicorn's keep-alive timer only runs between requests and stops at the next first byte).

    Connection cap: past ``max_connections`` open connections, a new one makes room by closing
    the oldest connection waiting for a request (idle, or a request only in part); only when
    every connection is busy with a request is the new one refused (503 and closed). So a flood
    of idle connections cannot lock real clients out, as uvicorn's ``limit_concurrency`` (503
    for every request while connections are over the limit) would.
    """

    read_timeout: float = 30.0
    max_connections: int = 1000
    _read_timer: asyncio.TimerHandle | None = None
    _arrivals = itertools.count()  # connection order; loop.time() ties (uvloop caches it per tick)
    _arrival: int = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arrival = next(self._arrivals)
        self._arm()
        if len(self.connections) > self.max_connections and not self._evict_idle():
            self.transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain"
                                 b"\r\nconnection: close\r\ncontent-length: 27\r\n\r\n"
                                 b"too many open connections\r\n")
            self.transport.close()

    def _waiting(self) -> bool:
        """No request in progress: idle, or its line and headers only in part."""
        return self.conn.their_state is h11.IDLE and (
            self.cycle is None or self.cycle.response_complete)

    def _evict_idle(self) -> bool:
        waiting = [c for c in self.connections if isinstance(c, ReadTimeoutProtocol)
                   and c is not self and c._waiting() and not c.transport.is_closing()]
        if not waiting:
            return False
        min(waiting, key=lambda c: c._arrival).transport.close()
        return True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(self.read_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _timed_out(self) -> None:
        self._read_timer = None
        # IDLE: no request yet, or its line and headers only in part; SEND_BODY: body unfinished.
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.transport.close()


# Query parameters that carry a secret: the websocket's ``?token=<API key>`` (browsers cannot set
# an Authorization header on a websocket), and the usual names of keys, should a client use them.
SECRET_QUERY = re.compile(r"([?&](?:token|access_token|api_key|apikey|key)=)[^&#\s]*", re.I)
REDACTED = "REDACTED"


def redact_query(target: str) -> str:
    """``target`` (a path with its query string) with the values of secret parameters
    replaced: ``/v1/comparisons/c/ws?token=s3cret`` → ``…/ws?token=REDACTED``."""
    return SECRET_QUERY.sub(rf"\g<1>{REDACTED}", target)


class RedactQueryTokens(logging.Filter):
    """Rewrites uvicorn's log records so that no API key given in a query string reaches the
    log: the access log (``uvicorn.access``: client, method, path with query, HTTP version,
    status) and the websocket handshake lines (``uvicorn.error``: ``"WebSocket <path with
    query>" [accepted]``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_query(a) if isinstance(a, str) else a
                                for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact_query(record.msg)
        return True


REDACTED_LOGGERS = ("uvicorn.access", "uvicorn.error")


def redact_access_log() -> None:
    """Install ``RedactQueryTokens`` on uvicorn's loggers (and their handlers, which records of
    child loggers reach without the parent's filters), once."""
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        for target in (logger, *logger.handlers):
            if not any(isinstance(f, RedactQueryTokens) for f in target.filters):
                target.addFilter(RedactQueryTokens())


def server_config(app: FastAPI, settings: Settings, log_level: str) -> uvicorn.Config:
    protocol = type("ReadTimeoutProtocol", (ReadTimeoutProtocol,),
                    {"read_timeout": settings.request_read_timeout,
                     "max_connections": settings.max_connections})
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=settings.shutdown_timeout,
        http=protocol,
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=settings.keep_alive_timeout,
    )
    redact_access_log()  # after the Config, which configures uvicorn's loggers
    return config
