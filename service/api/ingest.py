"""Request bodies in: the size limit, the media type, and parsing and validating a chunk (shape,
finiteness, limits, every model's support)."""

from __future__ import annotations

import email.message
import json
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
from modelcompare.service.core.config import JSON_BODY_COST
from modelcompare.service.schemas import MAX_ABS_VALUE, ComparisonSpec
from modelcompare.service.store.codec import encode_block
from modelcompare.service.validation import first_refusal


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


def parse_chunk(body: bytes, spec: ComparisonSpec, max_rows: int) -> tuple[bytes, int]:
    """The chunk's binary block and row count, or the 4xx ``ApiError`` that explains it (503
    when this server lacks a family of the comparison: ``require_families``)."""
    require_families(spec)
    # Every row of x opens a bracket: a body with far more than ``max_rows`` of them is refused
    # before it is parsed (json.loads would build a Python list per row); up to 10,000 lists
    # cost nothing, so a small ``max_rows`` still gets the precise answers below.
    if body.count(b"[") > max(max_rows, 10_000) + 2:
        raise ApiError(413, "too_large", f"more than {max_rows} rows (the limit)",
                       {"limit": max_rows})
    fast = parse_plain_chunk(body, spec.x_dim)
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
