"""Query rows in, for predict and the posterior expectation: rows of x by position, or rows by
name for a comparison whose models read named columns (``named_bodies``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import torch
from pydantic import ValidationError

from modelcompare.service.api.errors import ApiError, readable
from modelcompare.service.api.ingest import array_of, named_table
from modelcompare.service.api.named_bodies import (
    QUERY_MEDIA_TYPES,
    RowLimit,
    invalid,
    json_table,
    matrix_form,
    media_type,
    named_design,
    read_columns,
)
from modelcompare.service.schemas import ComparisonSpec, PredictIn


def parse_query(
    values: list[list[float]] | None, spec: ComparisonSpec, max_rows: int
) -> torch.Tensor | None:
    """Query inputs for predict: rows of ``x_dim`` finite numbers (one row if no model reads x),
    at most ``max_rows`` of them."""
    if values is not None and len(values) > max_rows:
        raise _too_many_queried("x", len(values), max_rows)
    x = array_of(values, 2, "x")
    if not spec.x_dim:
        return None if x is None else torch.from_numpy(x)
    if x is None or x.shape[0] == 0 or x.shape[1] != spec.x_dim:
        raise invalid(f"x must hold rows of {spec.x_dim} numbers")
    return torch.from_numpy(x)


def _too_many_queried(what: str, rows: int | None, max_rows: int) -> ApiError:
    counted = "more than" if rows is None else f"{rows:,}"
    return ApiError(422, "limit_exceeded", f"{what}: {counted} rows exceed the limit "
                    f"max_query_rows = {max_rows:,} (MODELCOMPARE_MAX_QUERY_ROWS)",
                    {"limit": "max_query_rows", "value": rows, "allowed": max_rows})


def parse_predict(body: bytes, content_type: str | None, spec: ComparisonSpec,
                  max_rows: int) -> torch.Tensor | None:
    """The query rows of a predict body: by name for a comparison with named columns (JSON or
    an Arrow IPC stream), else ``PredictIn``'s rows of x (``parse_query``)."""
    if spec.design is not None:
        try:
            table = named_table(body, media_type(content_type), spec,
                                 read_columns(spec, target=False), max_rows)
        except RowLimit as exc:
            raise _too_many_queried("rows", exc.rows, max_rows) from None
        return named_query(table, spec)
    if media_type(content_type) in QUERY_MEDIA_TYPES:
        raise matrix_form(spec)
    try:
        request = PredictIn.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if any(e["type"] == "extra_forbidden" and e["loc"] in (("columns",), ("records",))
               for e in errors):
            raise matrix_form(spec) from None
        # told as FastAPI's own validation of a body is (errors.install)
        shown = [readable({**e, "loc": ("body", *e["loc"])}, PredictIn) for e in errors]
        raise ApiError(422, "invalid_request", "; ".join(line for _, line in shown),
                       [detail for detail, _ in shown]) from None
    return parse_query(request.x, spec, max_rows)


def parse_named_query(data: dict[str, Any], spec: ComparisonSpec,
                      max_rows: int) -> torch.Tensor | None:
    """Query rows given by name in a JSON request (``{"columns": …}`` or ``{"records": …}``)."""
    try:
        table = json_table(data, spec, read_columns(spec, target=False), max_rows)
    except RowLimit as exc:
        raise _too_many_queried("rows", exc.rows, max_rows) from None
    return named_query(table, spec)


def named_query(table: pa.Table, spec: ComparisonSpec) -> torch.Tensor | None:
    """The design rows of query rows by name (no target)."""
    if table.num_rows == 0:
        raise invalid("query rows: at least one is needed")
    x, _ = named_design(spec, table, target=False)
    return None if x is None else torch.from_numpy(x)
