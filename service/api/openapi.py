"""The OpenAPI document, made exact where FastAPI's defaults are loose: operation ids are the
handlers' names (what a generated client calls them), 422 appears only where a route declares it
(with the shared error body, not FastAPI's ``HTTPValidationError``, which this API never sends),
API keys are declared on the protected operations with their 401/403, and the 201 of a create
links to every operation on the new comparison (for clients and stateful testers)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from modelcompare.service.api.deps import protected
from modelcompare.service.api.errors import MEANINGS
from modelcompare.service.api.named_bodies import NamedColumns, NamedRecords
from modelcompare.service.schemas import ChunkIn, PredictIn

ERROR_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def operation_id(route: APIRoute) -> str:
    """The handler's name: ``create_comparison``, ``ingest_chunk``, ``get_evidence``, …"""
    return route.name


def install(app: FastAPI, api_keys: bool) -> None:
    generate = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()  # FastAPI keeps it as app.openapi_schema
            _drop_default_validation_errors(schema)
            # Bodies a route parses itself (chunks, predict): only referenced from openapi_extra.
            for record in (ChunkIn, PredictIn, NamedColumns, NamedRecords):
                schema["components"]["schemas"][record.__name__] = record.model_json_schema()
            if api_keys:
                _declare_api_keys(schema)
            _link_created_comparison(schema)
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]


def _operations(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, operation) for path, item in schema["paths"].items() for operation in item.values()
    ]


def _drop_default_validation_errors(schema: dict[str, Any]) -> None:
    for _, operation in _operations(schema):
        response = operation["responses"].get("422", {})
        content = response.get("content", {}).get("application/json", {})
        if content.get("schema", {}).get("$ref", "").endswith("/HTTPValidationError"):
            del operation["responses"]["422"]
    for name in FASTAPI_VALIDATION_SCHEMAS:
        schema.get("components", {}).get("schemas", {}).pop(name, None)


def _declare_api_keys(schema: dict[str, Any]) -> None:
    """An "Authorize" button in /docs, the header in generated clients, 401/403 documented."""
    schema.setdefault("components", {})["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer"}
    }
    for path, operation in _operations(schema):
        if protected(path):
            operation["security"] = [{"apiKey": []}]
            for status in (401, 403):
                operation["responses"][str(status)] = {
                    "description": MEANINGS[status],
                    "content": ERROR_BODY,
                }


# Bodies that name something of the new comparison: the first model.
LINKED_BODIES = {"expectation": {"model": "$response.body#/models/0/name"}}


def _link_created_comparison(schema: dict[str, Any]) -> None:
    created = schema["paths"]["/v1/comparisons"]["post"]["responses"]["201"]
    links = {}
    for path, operation in _operations(schema):
        if "{cid}" in path:
            name = operation["operationId"]
            links[name] = {"operationId": name, "parameters": {"cid": "$response.body#/id"}}
            if name in LINKED_BODIES:
                links[name]["requestBody"] = LINKED_BODIES[name]
    created["links"] = links
