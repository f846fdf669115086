"""The memory one API process holds for request bodies, bounded in total
(``max_inflight_bytes``): every request sets its share aside before its body is read, or gets a
503 with ``Retry-After``; large requests give their memory back to the operating system.
See docs/guide/limits.md, "Memory in total"."""

from __future__ import annotations

import contextvars
import ctypes
import ctypes.util
import sys
import threading
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from modelcompare.service.api.errors import ApiError, error_response
from modelcompare.service.core.config import CHUNK_BODY_COST, JSON_BODY_COST

CHUNK_PATH = "/chunks"
RETRY_AFTER = 1  # seconds a client told 503 by InflightLimit waits before it retries
TRIM_AFTER = 8 * 1024 * 1024  # a request that set aside this much gives memory back at its end


class Inflight:
    """The bytes one process has set aside for the bodies it reads and parses: a request takes
    its share before it reads, or is refused; one alone always fits (a body larger than the
    whole budget is read when nothing else is in flight)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, amount: int, own: int = 0) -> bool:
        """Set ``amount`` aside unless others (all but ``own``, already held) would pass the
        limit with it."""
        with self._lock:
            if self.held > own and self.held + amount > self.limit:
                return False
            self.held += amount
            return True

    def give(self, amount: int) -> None:
        with self._lock:
            self.held -= amount


class Reservation:
    """What one request holds of an ``Inflight``; grows as its body arrives or its parse needs
    more (``extend``: 503 ``ApiError`` when the budget has no room)."""

    def __init__(self, inflight: Inflight) -> None:
        self.inflight = inflight
        self.held = 0

    def extend(self, amount: int) -> None:
        if amount <= 0:
            return
        if not self.inflight.take(amount, own=self.held):
            raise overloaded(self.inflight, amount)
        self.held += amount

    def ensure(self, total: int) -> None:
        """Hold at least ``total`` in all."""
        self.extend(total - self.held)

    def release(self) -> None:
        self.inflight.give(self.held)
        self.held = 0


# The request's reservation, seen by parse_chunk (which runs in a worker thread: the context is
# copied there).
RESERVATION: contextvars.ContextVar[Reservation | None] = contextvars.ContextVar(
    "modelcompare_reservation", default=None)


def overloaded(inflight: Inflight, amount: int) -> ApiError:
    return ApiError(
        503, "overloaded",
        f"the server is reading and parsing other requests ({inflight.held:,} of "
        f"max_inflight_bytes = {inflight.limit:,} set aside, MODELCOMPARE_MAX_INFLIGHT_BYTES); "
        f"this one needs {amount:,}: retry after {RETRY_AFTER} s",
        {"limit": "max_inflight_bytes", "value": amount, "held": inflight.held,
         "allowed": inflight.limit},
        headers={"Retry-After": str(RETRY_AFTER)})


class InflightLimit:
    """ASGI middleware: bounds the memory the process holds for request bodies being read and
    parsed (``max_inflight_bytes``). A request sets aside ``CHUNK_BODY_COST`` × its body for a
    chunk (parsed with numpy) or ``JSON_BODY_COST`` × for any other body (parsed into Python
    objects): by ``Content-Length`` before anything is read, or as a chunked body arrives. Past
    the budget: 503 with ``Retry-After`` and nothing read or stored. After a large request the
    freed memory goes back to the operating system (``malloc_trim``)."""

    def __init__(self, app: ASGIApp, inflight: Inflight) -> None:
        self.app = app
        self.inflight = inflight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        chunk = scope["method"] == "POST" and scope["path"].endswith(CHUNK_PATH)
        cost = CHUNK_BODY_COST if chunk else JSON_BODY_COST
        reservation = Reservation(self.inflight)
        declared = Headers(scope=scope).get("content-length", "")
        try:
            if declared.isdigit():
                try:
                    reservation.extend(int(declared) * cost)
                except ApiError as exc:
                    response = error_response(exc.status, exc.code, exc.message, exc.details,
                                              exc.headers)
                    await response(scope, receive, send)
                    return
                counted = receive
            else:
                async def counted() -> Message:
                    message = await receive()
                    if message["type"] == "http.request":
                        reservation.extend(len(message.get("body", b"")) * cost)
                    return message
            token = RESERVATION.set(reservation)
            try:
                await self.app(scope, counted, send)
            finally:
                RESERVATION.reset(token)
        finally:
            large = reservation.held >= TRIM_AFTER
            reservation.release()
            if large:
                trim_memory()


def _glibc(name: str) -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):  # not glibc (e.g. musl): nothing to call
        return None


_MALLOC_TRIM = _glibc("malloc_trim")
_MALLOPT = _glibc("mallopt")
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 8 * 1024 * 1024


def map_large_allocations() -> None:
    """Serve every allocation of 8 MiB or more (large bodies, their numbers, blocks) from its own
    mapping, returned to the system when freed. glibc's default threshold rises to 32 MiB after
    the first such free, so later bodies would come from the heap and stay there. (At 1 MiB,
    torch's arithmetic on 2 MB tensors ran 2-6× slower: a mapping per result.)"""
    if _MALLOPT is not None:
        _MALLOPT(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def trim_memory() -> None:
    """Give the heap's free pages back to the operating system (glibc keeps them otherwise:
    a process that once parsed a large body would hold its peak for good)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
