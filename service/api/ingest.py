"""Request bodies in: the size limit, the media type, and parsing and validating a chunk (shape,
finiteness, limits, every model's support)."""

from __future__ import annotations

import contextvars
import ctypes
import ctypes.util
import email.message
import json
import re
import sys
import threading
from typing import Any

import numpy as np
import torch
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from estimators import Rows
from service.api.errors import ApiError, error_response
from service.core.config import CHUNK_BODY_COST, JSON_BODY_COST
from service.schemas import MAX_ABS_VALUE, ComparisonSpec
from service.store.codec import HEADER, encode_block
from service.validation import first_refusal


def _invalid(message: str, details: Any = None) -> ApiError:
    return ApiError(422, "invalid_chunk", message, details)


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"body exceeds {limit} bytes")


# Read-only POSTs whose body is query rows: parsed by FastAPI on the event loop, so they get a
# tighter byte limit (MAX_QUERY_BODY_BYTES) than chunks, which are parsed in a thread.
QUERY_PATHS = ("/predict", "/expectation")


class BodyLimit:
    """ASGI middleware: 413 before reading a body whose Content-Length exceeds the limit, and as
    soon as a streamed (chunked) body passes it, so no route ever holds more than ``limit``
    (``query_limit`` for predict and expectation)."""

    def __init__(self, app: ASGIApp, limit: int, query_limit: int | None = None) -> None:
        self.app = app
        self.limit = limit
        self.query_limit = limit if query_limit is None else min(limit, query_limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.query_limit if scope["path"].endswith(QUERY_PATHS) else self.limit
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            response = error_response(413, "too_large", f"body exceeds {limit} bytes",
                                      {"limit": limit})
            await response(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited, send)


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


def is_json(content_type: str | None) -> bool:
    """``application/json`` or a ``+json`` type, parameters (charset) aside."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


async def json_body(request: Request) -> None:
    """Dependency of the routes that take a JSON body: 415 for a body of another media type (or
    of none), before anything reads it as JSON."""
    content_type = request.headers.get("content-type")
    if not is_json(content_type) and await request.body():
        got = content_type or "no Content-Type"
        raise ApiError(415, "unsupported_media_type",
                       f"the body must be application/json, got {got}",
                       {"content_type": content_type})


def _array(values: Any, ndim: int, name: str) -> np.ndarray | None:
    if values is None:
        return None
    if isinstance(values, str | bytes | dict) or not isinstance(values, list):
        raise _invalid(f"{name} must be a list of numbers", {"field": name})
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        array = np.asarray(None)
    if array.dtype.kind not in "iuf":  # ragged rows, strings, nulls, booleans, huge integers
        raise _invalid(f"{name} must be a rectangular list of numbers (ragged rows or "
                       "non-numbers)", {"field": name})
    array = array.astype(np.float64)
    if array.ndim != ndim:
        raise _invalid(f"{name} must have {ndim} dimension(s), got shape {array.shape}",
                       {"field": name, "shape": list(array.shape)})
    return _checked(array, name)


def _checked(array: np.ndarray, name: str) -> np.ndarray:
    """``array`` (float64) when every value is finite and within ±MAX_ABS_VALUE."""
    if not np.isfinite(array).all():
        raise _invalid(f"{name} contains NaN or infinite values", {"field": name})
    if array.size and max(array.max(), -array.min()) > MAX_ABS_VALUE:
        raise _invalid(f"{name} has values beyond ±{MAX_ABS_VALUE:g}", {"field": name})
    return array


# --- Chunks parsed with numpy, not json -------------------------------------------------------
# json.loads makes a Python float and a list slot per number (~25× the body with the arrays
# built from them). A chunk in plain JSON form ({"x": [[n, …], …], "y": [n, …]}, numbers as
# JSON writes them) is checked and parsed without Python objects: a map of character classes
# checks the grammar with substring counts, the brackets give the rows, and numpy's strtod-based
# fromstring (Python's own float conversion: the same doubles as json) reads the numbers
# straight into the block. Anything else (other whitespace, escapes in keys, empty rows, very
# long digit runs, bare -0, which json reads as the integer 0) goes to json, as do all errors,
# so answers and stored blocks are the same either way (tests/service/api/test_memory_bounds.py).

def _classes() -> bytes:
    table = bytearray(b"?" * 256)
    for char in b',[]{}":xy.+-':
        table[char] = char
    for char in b" \t\n\r":
        table[char] = ord(" ")
    for char in b"eE":
        table[char] = ord("e")
    for char in b"123456789":
        table[char] = ord("1")
    table[ord("0")] = ord("0")
    return bytes(table)


_CLASSES = _classes()
_DIGITS = bytes.maketrans(b"0", b"1")
_HEAD = re.compile(rb' *\{ *"([xy])" *: *')
_BETWEEN = re.compile(rb' *, *"([xy])" *: *')
_TAIL = re.compile(rb' *\} *')
_PIECE_BYTES = 1024 * 1024  # text parsed per numpy call


_SYMBOLS = b'01.e+-,[] {}":xy'  # the 16 classes, numbered 0..15 for the 4-gram table
_NUMBERED = bytes.maketrans(_SYMBOLS, bytes(range(16)))


def _bad_4grams() -> np.ndarray:
    """For every 4 classes (a, b, c, d), whether b in that context breaks a JSON number, or makes
    one strtod reads otherwise than json: a sign, dot or exponent out of place, a leading zero, or
    a bare -0 (json's integer 0, +0.0; strtod's -0.0)."""
    digits, start = b"01", b",[ "
    bad = np.zeros(1 << 16, dtype=bool)
    for code in range(1 << 16):
        a, b, c, d = (_SYMBOLS[(code >> shift) & 15] for shift in (12, 8, 4, 0))
        if b == ord("+"):
            bad[code] = a != ord("e") or c not in digits
        elif b == ord("-"):
            bad[code] = (a not in b"e" + start or c not in digits
                         or (a != ord("e") and c == ord("0") and d not in b".e"))
        elif b == ord("."):
            bad[code] = a not in digits or c not in digits
        elif b == ord("e"):
            bad[code] = a not in digits or c not in b"01+-"
        elif b == ord("0"):
            bad[code] = a in start and c in digits
    return bad


_BAD = _bad_4grams()
_SLICE = 1 << 18


def _grammar(s: bytes) -> np.ndarray | None:
    """The count of each class in the class map ``s`` (positions as ``_SYMBOLS``) when every
    number in it is one json and strtod read alike; None otherwise."""
    classes = np.frombuffer(s.translate(_NUMBERED), dtype=np.uint8)
    n = len(classes)
    if n < 4:
        return None
    counts = np.zeros(16, dtype=np.int64)
    for start in range(0, n, _SLICE):  # slices: temporaries of a few times _SLICE bytes
        counts += np.bincount(classes[start:start + _SLICE], minlength=16)
        low, high = max(start, 1), min(start + _SLICE, n - 2)  # the 4-grams centred here
        if low >= high:
            continue
        part = classes[low - 1:high + 2]
        pairs = (part[:-1] << 4) | part[1:]  # (class i, class i + 1) in one byte
        code = (pairs[:-2].astype(np.uint16) << 8) | pairs[2:]
        if _BAD[code].any():
            return None
    return counts


def _rows_of(s: bytes, opens: np.ndarray, closes: np.ndarray, x_dim: int) -> int | None:
    """The rows of the 2-D array opened by ``opens[0]``, each ``x_dim`` numbers and apart by one
    comma (``opens``, ``closes``: the brackets from there on); None when it is not so."""
    o, cl = opens[1:], closes
    m = min(len(o), len(cl))
    after = np.flatnonzero(o[:m] > cl[:m])
    rows = int(after[0]) if after.size else m
    if rows == 0 or rows >= len(cl) or not np.all(cl[:rows - 1] < o[1:rows]):
        return None
    if s.count(b" ", opens[0] + 1, o[0]) != o[0] - opens[0] - 1:
        return None
    if s.count(b" ", cl[rows - 1] + 1, cl[rows]) != cl[rows] - cl[rows - 1] - 1:
        return None
    for k in range(rows):
        start, end = int(o[k]) + 1, int(cl[k])
        if (s.count(b",", start, end) != x_dim - 1
                or s.count(b" ", start, end) == end - start):  # an empty row
            return None
        if k + 1 < rows and s[end + 1:int(o[k + 1])].strip(b" ") != b",":
            return None
    return rows


def _fromtext(text: bytes, out: np.ndarray) -> bool:
    """Numbers of ``text`` (brackets dropped) into ``out``; False unless exactly that many."""
    try:
        values = np.fromstring(text.translate(None, b"[]"), dtype=np.float64, sep=",")
    except ValueError:
        return False
    if values.size != out.size:
        return False
    out[...] = values.reshape(out.shape)
    return True


def _fast_chunk(
    body: bytes, x_dim: int
) -> tuple[bytearray, np.ndarray | None, np.ndarray | None] | None:
    """The block and its x and y (views of it) of a chunk in plain JSON form; None otherwise."""
    s = body.translate(_CLASSES)
    counts = None if b"?" in s else _grammar(s)
    if counts is None:
        return None
    # without blanks: no empty number (numpy reads " " as -1) and no integer part of 19 digits
    # or more (json refuses integers past 64 bits)
    packed = s.translate(_DIGITS, b" ")
    if (b",," in packed or b",]" in packed or b"[," in packed
            or any(start + b"1" * 19 in packed for start in (b",", b"[", b"-"))):
        return None
    del packed
    classes = np.frombuffer(s, dtype=np.uint8)
    opens = np.flatnonzero(classes == ord("["))
    closes = np.flatnonzero(classes == ord("]"))
    del classes
    spans: dict[bytes, tuple[int, int, int]] = {}  # key -> (start, end, rows)
    row_ends = closes[:0]  # where each row of x closes
    head = _HEAD.fullmatch(s, 0, int(opens[0])) if opens.size else None
    used_open = used_close = 0
    pattern_end = head.end() if head else 0
    key = head.group(1) if head else None
    while key is not None:
        if key in spans or used_open >= len(opens) or opens[used_open] != pattern_end:
            return None
        if key == b"x":
            if not x_dim:
                return None
            rows = _rows_of(s, opens[used_open:], closes[used_close:], x_dim)
            if rows is None:
                return None
            spans[key] = (int(opens[used_open]), int(closes[used_close + rows]), rows)
            row_ends = closes[used_close:used_close + rows]
            used_open, used_close = used_open + rows + 1, used_close + rows + 1
        else:
            start, end = int(opens[used_open]), int(closes[used_close])
            if (used_open + 1 < len(opens) and opens[used_open + 1] < end) or end < start:
                return None
            numbers = s.count(b",", start, end) + 1
            if s.count(b" ", start + 1, end) == end - start - 1:  # []: no numbers
                return None
            spans[key] = (start, end, numbers)
            used_open, used_close = used_open + 1, used_close + 1
        end = spans[key][1] + 1
        after = _BETWEEN.match(s, end)
        if after is not None and used_open < len(opens):
            key, pattern_end = after.group(1), after.end()
            continue
        if _TAIL.fullmatch(s, end) is None or used_open != len(opens) or used_close != len(
                closes):
            return None
        key = None
    keys = len(spans)
    skeleton = [counts[_SYMBOLS.index(char)] for char in b'{}":xy']
    if not keys or skeleton != [1, 1, 2 * keys, keys, b"x" in spans, b"y" in spans]:
        return None  # e.g. a key or brace inside an array
    del s, opens, closes
    rows = spans[b"x"][2] if b"x" in spans else spans[b"y"][2]
    if b"y" in spans and spans[b"y"][2] != rows:
        return None
    columns = x_dim if b"x" in spans else 0
    buffer = bytearray(HEADER.size + 8 * rows * (columns + (b"y" in spans)))
    HEADER.pack_into(buffer, 0, rows, columns, int(b"y" in spans))
    x = y = None
    offset = HEADER.size
    if b"x" in spans:
        start, end, _ = spans[b"x"]
        x = np.frombuffer(buffer, dtype="<f8", count=rows * columns, offset=offset)
        x = x.reshape(rows, columns)
        offset += 8 * rows * columns
        step = max(1, _PIECE_BYTES * rows // max(end - start, 1))
        for first in range(0, rows, step):
            last = min(first + step, rows)
            piece = body[(int(row_ends[first - 1]) + 1 if first else start + 1):
                         int(row_ends[last - 1]) + 1]
            if not _fromtext(piece.lstrip(b" \t\n\r,"), x[first:last]):
                return None
    if b"y" in spans:
        start, end, _ = spans[b"y"]
        y = np.frombuffer(buffer, dtype="<f8", count=rows, offset=offset)
        if not _fromtext(body[start + 1:end], y):
            return None
    return buffer, x, y


def parse_chunk(body: bytes, spec: ComparisonSpec, max_rows: int) -> tuple[bytes, int]:
    """The chunk's binary block and row count, or the 4xx ``ApiError`` that explains it."""
    # Every row of x opens a bracket: a body with far more than ``max_rows`` of them is refused
    # before it is parsed (json.loads would build a Python list per row); up to 10,000 lists
    # cost nothing, so a small ``max_rows`` still gets the precise answers below.
    if body.count(b"[") > max(max_rows, 10_000) + 2:
        raise ApiError(413, "too_large", f"more than {max_rows} rows (the limit)",
                       {"limit": max_rows})
    fast = _fast_chunk(body, spec.x_dim)
    block: bytes | None = None
    if fast is not None:
        block, x, y = fast  # type: ignore[assignment]  # a bytearray: redis and sha256 take it
        x = None if x is None else _checked(x, "x")
        y = None if y is None else _checked(y, "y")
    else:
        reservation = RESERVATION.get()
        if reservation is not None:  # json holds Python objects: more than a chunk set aside
            reservation.ensure(JSON_BODY_COST * len(body))
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise _invalid(f"body is not JSON: {exc}") from None
        except RecursionError:
            raise _invalid("body is nested too deeply") from None
        if not isinstance(data, dict) or set(data) - {"x", "y"}:
            raise _invalid('body must be an object with "x" and/or "y"')
        x, y = _array(data.get("x"), 2, "x"), _array(data.get("y"), 1, "y")
        del data
    if spec.x_dim and x is None:
        raise _invalid(f"x is required: rows of {spec.x_dim} numbers")
    if not spec.x_dim and x is not None:
        raise _invalid("no model of this comparison reads x; leave it out")
    if spec.has_y and y is None:
        raise _invalid("y is required")
    if not spec.has_y and y is not None:
        raise _invalid("no model of this comparison has a target; leave y out")
    if x is not None and y is not None and x.shape[0] != y.shape[0]:
        raise _invalid(f"x has {x.shape[0]} rows but y has {y.shape[0]}")
    reference = x if x is not None else y
    if reference is None:
        raise _invalid('a chunk needs "x" or "y"')
    rows = int(reference.shape[0])
    if rows == 0:
        raise _invalid("a chunk needs at least one row")
    if rows > max_rows:
        raise ApiError(413, "too_large", f"{rows} rows exceed the limit of {max_rows}",
                       {"rows": rows, "limit": max_rows})
    if x is not None and x.shape[1] != spec.x_dim:
        raise _invalid(f"rows of x need {spec.x_dim} numbers, got {x.shape[1]}",
                       {"columns": x.shape[1], "expected": spec.x_dim})
    tensors = Rows(
        None if x is None else torch.from_numpy(x), None if y is None else torch.from_numpy(y)
    )
    refusal = first_refusal(spec, tensors)
    if refusal is not None:
        raise _invalid(refusal.describe(f"row {refusal.row} of the chunk (from 0)"),
                       {"model": refusal.model, "row": refusal.row, "value": refusal.value})
    return (encode_block(x, y) if block is None else block), rows


def parse_query(
    values: list[list[float]] | None, spec: ComparisonSpec, max_rows: int
) -> torch.Tensor | None:
    """Query inputs for predict: rows of ``x_dim`` finite numbers (one row if no model reads x),
    at most ``max_rows`` of them."""
    if values is not None and len(values) > max_rows:
        raise ApiError(422, "limit_exceeded", f"x: {len(values):,} rows exceed the limit "
                       f"max_query_rows = {max_rows:,} (MODELCOMPARE_MAX_QUERY_ROWS)",
                       {"limit": "max_query_rows", "value": len(values), "allowed": max_rows})
    x = _array(values, 2, "x")
    if not spec.x_dim:
        return None if x is None else torch.from_numpy(x)
    if x is None or x.shape[0] == 0 or x.shape[1] != spec.x_dim:
        raise _invalid(f"x must hold rows of {spec.x_dim} numbers")
    return torch.from_numpy(x)
