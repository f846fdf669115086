"""Every client error is JSON ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging
from typing import Any

import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.store.comparisons import NotFound

log = logging.getLogger("modelcompare.api")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def not_found(cid: str) -> ApiError:
    return ApiError(404, "not_found", f"no comparison with id {cid!r}", {"id": cid})


def error_response(status: int, code: str, message: str, details: Any = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": jsonable_encoder(details)}}
    return JSONResponse(status_code=status, content=body, headers=headers)


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
        errors = [
            {k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()
        ]
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
        return error_response(422, "invalid_request", message, errors)

    @app.exception_handler(redis.exceptions.ConnectionError)
    @app.exception_handler(redis.exceptions.TimeoutError)
    async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.warning("redis unreachable on %s %s: %s", request.method, request.url.path, exc)
        return error_response(503, "unavailable", "the data store is unreachable; retry later",
                              headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal server error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))
