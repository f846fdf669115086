"""The HTTP server's limits (docs/guide/limits.md): header size, keep-alive and request-read
timeouts, a connection cap that evicts idle connections first, a cap on open websockets.
``server_config`` is what ``modelcompare serve`` runs uvicorn with, its access log keeping API
keys out (``RedactQueryTokens``)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import OrderedDict

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.datastructures import Headers
from websockets.http11 import Request
from websockets.server import ServerProtocol

from modelcompare.service.core.config import Settings

# What a connection refused at the cap is told: the API's error body, written before the request
# is read (there may be none yet).
REFUSAL_BODY = json.dumps({"error": {
    "code": "overloaded", "message": "too many open connections, none idle; try again",
    "details": {"limit": "max_connections"}}}).encode()
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
           b"retry-after: 1\r\nconnection: close\r\ncontent-length: "
           + str(len(REFUSAL_BODY)).encode() + b"\r\n\r\n" + REFUSAL_BODY)
REFUSAL_LINGER = 1.0  # seconds a refused connection stays open for the client to read why
CLOSE_TRY_AGAIN_LATER = 1013
WEBSOCKETS_FULL = "too many websockets open on this server (max_websockets); reconnect later"
# A connection is idle, and may be closed to make room, once it has waited this long for a
# request: one just opened has had no time to send it (a burst of handshakes is accepted before
# any is read), and a client sending requests one after another keeps its connection.
IDLE_AFTER = 1.0


class Waiting:
    """One server's connections that wait for a request, in the order they make room for new
    ones once idle (``IDLE_AFTER``): first those never answered (silent since they opened, or a
    first request stalled part way), oldest first; then keep-alive connections between
    requests, the least recently answered first. So a flood of connections that send nothing
    makes room among itself, and a client that is being served keeps its connection. One step
    per new connection, whatever the number of connections."""

    def __init__(self) -> None:
        # connection -> loop time since when it has waited
        self._fresh: OrderedDict[ReadTimeoutProtocol, float] = OrderedDict()
        self._kept: OrderedDict[ReadTimeoutProtocol, float] = OrderedDict()

    def fresh(self, connection: ReadTimeoutProtocol, now: float) -> None:
        self._fresh[connection] = now

    def kept(self, connection: ReadTimeoutProtocol, now: float) -> None:
        """``connection`` was just answered: the last of the keep-alive ones to make room."""
        self.discard(connection)
        self._kept[connection] = now

    def discard(self, connection: ReadTimeoutProtocol) -> None:
        self._fresh.pop(connection, None)
        self._kept.pop(connection, None)

    def first_idle(self, now: float) -> ReadTimeoutProtocol | None:
        """The next connection to make room (taken out), None when none is idle."""
        for queue in (self._fresh, self._kept):
            if queue:
                connection, since = next(iter(queue.items()))
                if now - since >= IDLE_AFTER:
                    del queue[connection]
                    return connection
        return None


class CountedWebSockets(WebSocketsSansIOProtocol):
    """uvicorn's websocket protocol, each connection in ``open`` (one set per server) from its
    upgrade to its end."""

    open: set[asyncio.Protocol]  # one per server (server_config)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.open.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.open.discard(self)
        super().connection_lost(exc)


class ReadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol with three limits.

    Request-read timeout: a connection whose request (line, headers and body) has not fully
    arrived ``read_timeout`` seconds after it opened or the previous response ended is closed,
    so a client that connects and sends nothing, or a byte a minute, holds it that long at most
    (uvicorn's keep-alive timer only runs between requests and stops at the next first byte).
    A websocket's handshake request is bounded the same way.

    Connection cap: past ``max_connections`` open connections (websockets included), a new one
    makes room by closing the first idle one of the ``waiting`` connections (see ``Waiting``);
    when none is idle the new one is refused: 503 with ``Retry-After`` and a JSON error, then a
    half-close, so that the client reads the answer rather than a reset. So a flood of idle
    connections cannot lock real clients out, as uvicorn's ``limit_concurrency`` (503 for every
    request while connections are over the limit) would.

    Websocket cap: past ``max_websockets`` open websockets, an upgrade request gets the
    handshake and at once a close frame, 1013 (try again later) with the reason, before the app
    runs: cheap however many ask at once, and a browser sees the code and reason (it sees no
    HTTP status). Below ``max_connections``, so that HTTP requests keep the rest.
    """

    read_timeout: float = 30.0
    max_connections: int = 1000
    max_websockets: int = 500
    waiting: Waiting  # one per server (server_config)
    websockets: set[asyncio.Protocol]  # the server's open websockets (CountedWebSockets.open)
    _read_timer: asyncio.TimerHandle | None = None
    _refused = False  # answered 503 or 1013: what the client sends is dropped until the close
    _refused_websocket = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()
        if len(self.connections) > self.max_connections and not self._make_room():
            self._refuse()
        else:
            self.waiting.fresh(self, self.loop.time())

    def _waiting(self) -> bool:
        """No request in progress: idle, or its line and headers only in part."""
        return self.conn.their_state is h11.IDLE and (
            self.cycle is None or self.cycle.response_complete)

    def _make_room(self) -> bool:
        first = self.waiting.first_idle(self.loop.time())
        if first is None:
            return False
        first.transport.close()
        return True

    def _refuse(self) -> None:
        self.transport.write(REFUSAL)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger()

    def _linger(self) -> None:
        """Close in ``REFUSAL_LINGER`` seconds, or when the client does, reading and dropping
        what it sends meanwhile: a close with unread data would reset the connection, and the
        client could lose the answer."""
        self._refused = True
        self._disarm()
        self.loop.call_later(REFUSAL_LINGER, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if self._refused_websocket:  # its answer to the close frame: the closing handshake ends
            self.transport.close()
        elif not self._refused:
            super().data_received(data)
            if not self._waiting():
                self.waiting.discard(self)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self.transport.is_closing():
            return
        self._arm()
        if self._waiting():
            self.waiting.kept(self, self.loop.time())

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm()
        self.waiting.discard(self)
        if len(self.websockets) >= self.max_websockets:
            self._refuse_websocket(event)
        else:
            super().handle_websocket_upgrade(event)

    def _refuse_websocket(self, event: h11.Request) -> None:
        handshake = ServerProtocol()
        response = handshake.accept(Request(event.target.decode("latin-1"), Headers(
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers])))
        handshake.send_response(response)  # a 4xx when the request was no valid upgrade
        if response.status_code == 101:
            handshake.send_close(CLOSE_TRY_AGAIN_LATER, WEBSOCKETS_FULL)
            self._refused_websocket = True
        self.transport.write(b"".join(handshake.data_to_send()))
        self._linger()

    def shutdown(self) -> None:
        if self._refused:  # answered already, outside h11's states
            self.transport.close()
        else:
            super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.waiting.discard(self)
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
    websockets: set[asyncio.Protocol] = set()
    protocol = type("ReadTimeoutProtocol", (ReadTimeoutProtocol,),
                    {"read_timeout": settings.request_read_timeout,
                     "max_connections": settings.max_connections,
                     "max_websockets": settings.max_websockets, "waiting": Waiting(),
                     "websockets": websockets})
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=settings.shutdown_timeout,
        http=protocol,
        ws=type("CountedWebSockets", (CountedWebSockets,), {"open": websockets}),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=settings.keep_alive_timeout,
    )
    redact_access_log()  # after the Config, which configures uvicorn's loggers
    return config
