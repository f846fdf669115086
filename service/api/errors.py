"""Every client error is JSON ``{"error": {"code", "message", "details"}}`` (``ErrorBody``), and
every route declares the statuses it can answer with that body (``error_responses``)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from modelcompare.service.store.comparisons import NotFound
from modelcompare.service.store.connection import CLUSTER_UNAVAILABLE, UNAVAILABLE

log = logging.getLogger("modelcompare.api")


class ErrorDetail(BaseModel):
    code: str = Field(description="machine-readable, e.g. not_found, invalid_request")
    message: str = Field(description="what went wrong, for a person")
    details: Any = Field(description="structured context (the field, the limit, …) or null")


class ErrorBody(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorDetail


# What each status means on this API; a route lists the ones it can answer (error_responses).
MEANINGS = {
    400: "the body could not be read as text (e.g. not UTF-8)",
    401: "no API key, or an unknown one (`Authorization: Bearer <key>`)",
    403: "the API key's scope does not cover this comparison or action",
    404: "no comparison with this id",
    409: "conflicts with the comparison's state (see the error code)",
    413: "the body exceeds MODELCOMPARE_MAX_BODY_BYTES or the chunk MODELCOMPARE_MAX_ROWS",
    415: "the body is not `application/json`",
    422: "invalid values or shapes; `details` says where",
    503: "the data store, or the Redis Cluster shard holding this data, is unavailable; retry "
    "after `Retry-After` seconds",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these statuses, all with the shared error body."""
    return {status: {"model": ErrorBody, "description": MEANINGS[status]} for status in statuses}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def not_found(cid: str) -> ApiError:
    return ApiError(404, "not_found", f"no comparison with id {cid!r}", {"id": cid})


def error_response(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": jsonable_encoder(details)}}
    return JSONResponse(status_code=status, content=body, headers=headers)


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405 (RFC 9110 §15.5.6): every method some route answers on this
    path (Starlette's own header lists only the first matching route's)."""
    routes = request.app.router.routes
    return ", ".join(
        method
        for method in METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes
        )
    )


def unavailable(exc: BaseException) -> tuple[str, str]:
    """The code and message of a 503 (or a websocket's 1013) for an ``UNAVAILABLE`` error."""
    if isinstance(exc, CLUSTER_UNAVAILABLE):
        return ("cluster_unavailable",
                "the Redis Cluster shard holding this data is down or failing over "
                f"({type(exc).__name__}); retry later")
    return "unavailable", "the data store is unreachable; retry later"


_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        # On a websocket handshake this response is sent as the HTTP denial (401, 403, 404).
        return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        error = not_found(str(exc))
        return error_response(error.status, error.code, error.message, error.details)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
        return error_response(422, "invalid_request", message, errors)

    async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.warning("redis unavailable on %s %s: %s: %s", request.method, request.url.path,
                    type(exc).__name__, exc)
        code, message = unavailable(exc)
        return error_response(503, code, message, headers={"Retry-After": "1"})

    for kind in UNAVAILABLE:
        app.add_exception_handler(kind, _unavailable)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal server error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODES.get(exc.status_code, "http_error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)
