"""Request bodies in: the size limit, the media type, and parsing and validating a chunk (shape,
finiteness, limits, every model's support), by position (``x``, ``y``) or, for a comparison
whose models read named columns, by name (``named_bodies``)."""

from __future__ import annotations

import email.message
import json
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import torch
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from modelcompare.estimators import Rows
from modelcompare.service.api.chunk_text import parse_plain_chunk
from modelcompare.service.api.errors import ApiError, error_response, require_families
from modelcompare.service.api.inflight import RESERVATION
from modelcompare.service.api.named_bodies import (
    CHUNK_MEDIA_TYPES,
    JSON,
    RowLimit,
    binary_table,
    invalid,
    json_table,
    matrix_form,
    media_type,
    named_design,
    read_columns,
)
from modelcompare.service.core.config import JSON_BODY_COST
from modelcompare.service.schemas import MAX_ABS_VALUE, ComparisonSpec
from modelcompare.service.store.codec import encode_block
from modelcompare.service.validation import first_refusal


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


def is_json(content_type: str | None) -> bool:
    """``application/json`` or a ``+json`` type, parameters (charset) aside."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


def json_or(*media_types: str) -> Callable[[Request], Awaitable[None]]:
    """Dependency of the routes that take a body: 415 for a body neither JSON nor of one of
    ``media_types`` (or of no media type), before anything reads it."""
    accepted = " or ".join((", ".join(("application/json", *media_types[:-1])),
                            *media_types[-1:]))

    async def dependency(request: Request) -> None:
        content_type = request.headers.get("content-type")
        if (not is_json(content_type) and media_type(content_type) not in media_types
                and await request.body()):
            got = content_type or "no Content-Type"
            raise ApiError(415, "unsupported_media_type",
                           f"the body must be {accepted}, got {got}",
                           {"content_type": content_type})

    return dependency


json_body = json_or()


def array_of(values: Any, ndim: int, name: str) -> np.ndarray | None:
    if values is None:
        return None
    if isinstance(values, str | bytes | dict) or not isinstance(values, list):
        raise invalid(f"{name} must be a list of numbers", {"field": name})
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        array = np.asarray(None)
    if array.dtype.kind not in "iuf":  # ragged rows, strings, nulls, booleans, huge integers
        raise invalid(f"{name} must be a rectangular list of numbers (ragged rows or "
                       "non-numbers)", {"field": name})
    array = array.astype(np.float64)
    if array.ndim != ndim:
        raise invalid(f"{name} must have {ndim} dimension(s), got shape {array.shape}",
                       {"field": name, "shape": list(array.shape)})
    return _checked(array, name)


def _checked(array: np.ndarray, name: str) -> np.ndarray:
    """``array`` (float64) when every value is finite and within ±MAX_ABS_VALUE."""
    if not np.isfinite(array).all():
        raise invalid(f"{name} contains NaN or infinite values", {"field": name})
    if array.size and max(array.max(), -array.min()) > MAX_ABS_VALUE:
        raise invalid(f"{name} has values beyond ±{MAX_ABS_VALUE:g}", {"field": name})
    return array


def _too_many(rows: int | None, max_rows: int) -> ApiError:
    if rows is None:
        return ApiError(413, "too_large", f"more than {max_rows} rows (the limit)",
                        {"limit": max_rows})
    return ApiError(413, "too_large", f"{rows} rows exceed the limit of {max_rows}",
                    {"rows": rows, "limit": max_rows})


def _json(body: bytes) -> Any:
    reservation = RESERVATION.get()
    if reservation is not None:  # json holds Python objects: more than a chunk set aside
        reservation.ensure(JSON_BODY_COST * len(body))
    try:
        return json.loads(body)
    except ValueError as exc:
        raise invalid(f"body is not JSON: {exc}") from None
    except RecursionError:
        raise invalid("body is nested too deeply") from None


def named_table(body: bytes, media: str, spec: ComparisonSpec, columns: list[str],
                 max_rows: int) -> Any:
    """The pyarrow table of a body in a named form: JSON or a binary table (``media``)."""
    if media not in CHUNK_MEDIA_TYPES:  # JSON (the routes let no other media type through)
        return json_table(_json(body), spec, columns, max_rows)
    return binary_table(body, media, columns, max_rows)


def parse_chunk(body: bytes, spec: ComparisonSpec, max_rows: int,
                content_type: str | None = JSON) -> tuple[bytes, int]:
    """The chunk's binary block and row count, or the 4xx ``ApiError`` that explains it (503
    when this server lacks a family of the comparison: ``require_families``). A comparison
    with named columns takes its chunks by name (JSON, CSV, Parquet, Arrow), any other as
    JSON rows by position; both make the same block from the same design rows."""
    require_families(spec)
    if spec.design is not None:
        try:
            table = named_table(body, media_type(content_type), spec,
                                 read_columns(spec, target=True), max_rows)
        except RowLimit as exc:
            raise _too_many(exc.rows, max_rows) from None
        x, y = named_design(spec, table, target=True)
        return _block(spec, x, y, max_rows)
    if media_type(content_type) in CHUNK_MEDIA_TYPES:
        raise matrix_form(spec)
    # Every row of x opens a bracket: a body with far more than ``max_rows`` of them is refused
    # before it is parsed (json.loads would build a Python list per row); up to 10,000 lists
    # cost nothing, so a small ``max_rows`` still gets the precise answers below.
    if body.count(b"[") > max(max_rows, 10_000) + 2:
        raise _too_many(None, max_rows)
    fast = parse_plain_chunk(body, spec.x_dim)
    block: bytes | None = None
    if fast is not None:
        block, x, y = fast  # type: ignore[assignment]  # a bytearray: redis and sha256 take it
        x = None if x is None else _checked(x, "x")
        y = None if y is None else _checked(y, "y")
    else:
        data = _json(body)
        if isinstance(data, dict) and {"columns", "records"} & set(data):
            raise matrix_form(spec)
        if not isinstance(data, dict) or set(data) - {"x", "y"}:
            raise invalid('body must be an object with "x" and/or "y"')
        x, y = array_of(data.get("x"), 2, "x"), array_of(data.get("y"), 1, "y")
        del data
    return _block(spec, x, y, max_rows, block)


def _block(spec: ComparisonSpec, x: np.ndarray | None, y: np.ndarray | None, max_rows: int,
           block: bytes | None = None) -> tuple[bytes, int]:
    """The block of a chunk's rows (``block`` when already encoded) and their count, once
    their shapes fit the comparison and every model accepts them."""
    if spec.x_dim and x is None:
        raise invalid(f"x is required: rows of {spec.x_dim} numbers")
    if not spec.x_dim and x is not None:
        raise invalid("no model of this comparison reads x; leave it out")
    if spec.has_y and y is None:
        raise invalid("y is required")
    if not spec.has_y and y is not None:
        raise invalid("no model of this comparison has a target; leave y out")
    if x is not None and y is not None and x.shape[0] != y.shape[0]:
        raise invalid(f"x has {x.shape[0]} rows but y has {y.shape[0]}")
    reference = x if x is not None else y
    if reference is None:
        raise invalid('a chunk needs "x" or "y"')
    rows = int(reference.shape[0])
    if rows == 0:
        raise invalid("a chunk needs at least one row")
    if rows > max_rows:
        raise _too_many(rows, max_rows)
    if x is not None and x.shape[1] != spec.x_dim:
        raise invalid(f"rows of x need {spec.x_dim} numbers, got {x.shape[1]}",
                       {"columns": x.shape[1], "expected": spec.x_dim})
    tensors = Rows(
        None if x is None else torch.from_numpy(x), None if y is None else torch.from_numpy(y)
    )
    refusal = first_refusal(spec, tensors)
    if refusal is not None:
        raise invalid(refusal.describe(f"row {refusal.row} of the chunk (from 0)"),
                       {"model": refusal.model, "row": refusal.row, "value": refusal.value})
    return (encode_block(x, y) if block is None else block), rows
