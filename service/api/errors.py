"""Every client error is JSON ``{"error": {"code", "message", "details"}}`` (``ErrorBody``), and
every route declares the statuses it can answer with that body (``error_responses``)."""

from __future__ import annotations

import logging
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from modelcompare.service.schemas import ComparisonSpec
from pydantic_core import ErrorDetails
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from modelcompare.models.config import unknown_key
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
    415: "the body is not of a media type the route takes (`application/json`; chunks also "
    "`text/csv`, `application/vnd.apache.parquet`, `application/vnd.apache.arrow.stream`)",
    422: "invalid values or shapes; `details` says where",
    503: "the data store, or the Redis Cluster shard holding this data, is unavailable; retry "
    "after `Retry-After` seconds (or, `family_unavailable`: this server lacks a model family "
    "the comparison uses, a plugin to install here)",
}


def require_families(spec: ComparisonSpec) -> None:
    """503 ``family_unavailable`` when this server cannot build one of the comparison's models
    (a plugin family not installed here, or a version that cannot continue it): the deployment
    lacks it, the request is fine."""
    why = spec.unavailable()
    if why is not None:
        raise ApiError(503, "family_unavailable",
                       f"this server cannot build {why.removeprefix('model ')}: install the "
                       "family's package on the API servers (and workers)", {"reason": why})


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


def _bare(annotation: Any) -> Any:
    """``annotation`` without ``Annotated[…]`` and without ``| None`` beside a single type (a
    nullable value adds no step to an error's location; a union of several does)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _bare(members[0])
    return annotation


def _is_record(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _tags(annotation: Any) -> set[Any]:
    """The ``Literal`` values of a record's fields: a discriminated union's member is named in
    an error's location by its tag (``family``'s or ``method``'s value)."""
    if not _is_record(annotation):
        return set()
    literals = [f.annotation for f in annotation.model_fields.values()]
    return {v for a in literals if get_origin(a) is Literal for v in get_args(a)}


def _inside(annotation: Any, step: str | int) -> Any:
    """The type one step of an error's location leads to from ``annotation``, or None."""
    annotation = _bare(annotation)
    if _is_record(annotation):
        field = annotation.model_fields.get(str(step))
        return None if field is None else field.annotation
    if get_origin(annotation) is list:
        return get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        return next((m for m in get_args(annotation) if step in _tags(_bare(m))), None)
    return None


def record_at(body: Any, path: Sequence[str | int]) -> type[BaseModel] | None:
    """The record at ``path`` (an error's location after ``body``) in a request body of type
    ``body``: the one whose keys an ``extra_forbidden`` error's key is not among."""
    for step in path:
        body = _inside(body, step)
    body = _bare(body)
    return body if _is_record(body) else None


def readable(error: ErrorDetails, body: Any) -> tuple[dict[str, Any], str]:
    """A validation error's entry in ``details`` (``loc``, ``msg``, ``type``) and its line of the
    message, ``where: what``. An unknown key of the request body (of type ``body``) is told at
    the record that lacks it, with that record's keys (``unknown_key``)."""
    loc, msg = error["loc"], error["msg"]
    where = loc
    if error["type"] == "extra_forbidden" and loc[:1] == ("body",):
        record = record_at(body, loc[1:-1])
        if record is not None:
            where, msg = loc[:-1], unknown_key(str(loc[-1]), list(record.model_fields))
    return {"loc": loc, "msg": msg, "type": error["type"]}, f"{'.'.join(map(str, where))}: {msg}"


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
        body_field = getattr(request.scope.get("route"), "body_field", None)
        body = None if body_field is None else body_field.field_info.annotation
        shown = [readable(e, body) for e in exc.errors()]
        message = "; ".join(line for _, line in shown)
        return error_response(422, "invalid_request", message, [detail for detail, _ in shown])

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
