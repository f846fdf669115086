"""Debiased posterior expectations of one model over a comparison's stored rows (paths of
partial posteriors, ``modelcompare.estimators.functionals.partial_posteriors``)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import torch
from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from modelcompare.estimators import EstimatorError
from modelcompare.estimators.data.history import cat_rows
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.models.config import Integer
from modelcompare.service.api.deps import SettingsDep, StoreDep
from modelcompare.service.api.errors import ApiError, error_responses, require_families
from modelcompare.service.api.ingest import json_body
from modelcompare.service.api.named_bodies import (
    NamedColumnValues,
    NamedRecordValues,
    matrix_form,
)
from modelcompare.service.api.query_rows import parse_named_query, parse_query
from modelcompare.service.api.responses import ExpectationOut, returns
from modelcompare.service.engine import runner_for
from modelcompare.service.schemas import STRICT_JSON, ComparisonSpec, NonNegative, QueryRows

router = APIRouter(prefix="/v1/comparisons/{cid}", tags=["data"])


# The fields that give query rows: by position, or by name (a comparison with named columns).
ROW_FIELDS = {"x": "array", "columns": "object", "records": "array"}


class ExpectationIn(BaseModel):
    """``functional``: parameter ``mean``, ``second_moment`` (unconstrained θ, as the model
    defines it) or ``predictive`` at query rows (``x``, or by name ``columns`` or ``records``,
    as the comparison takes its chunks); ``repetitions`` R and truncation rate ``alpha`` of
    P(T = t) ∝ 2^(−αt); ``seed`` null: derived from the comparison's seed and sequence."""

    model_config = ConfigDict(**STRICT_JSON, json_schema_extra={  # "predictive" needs rows
        "if": {"properties": {"functional": {"const": "predictive"}}, "required": ["functional"]},
        "then": {"anyOf": [{"required": [name], "properties": {name: {"type": kind}}}
                           for name, kind in ROW_FIELDS.items()]},
    })
    model: str = Field(description="a model of this comparison")
    functional: Literal["mean", "second_moment", "predictive"]
    x: QueryRows | None = Field(default=None, description="query rows for predictive")
    columns: NamedColumnValues | None = Field(
        default=None, description="query rows for predictive, by column name")
    records: NamedRecordValues | None = Field(
        default=None, description="query rows for predictive, as records of named values")
    repetitions: Integer = Field(default=100, ge=1, le=10_000)
    alpha: float = Field(default=0.5, gt=0.0, lt=1.0)
    seed: NonNegative | None = None


@router.post("/expectation", **returns(ExpectationOut), dependencies=[Depends(json_body)],
             responses=error_responses(400, 404, 409, 413, 415, 422, 503))
async def expectation(cid: str, body: ExpectationIn, store: StoreDep,
                      settings: SettingsDep) -> dict[str, Any]:
    """Unbiased E[φ(θ) | all stored rows] for one model, averaged over R repetitions."""
    meta = await store.meta(cid)
    spec = meta.spec
    require_families(spec)
    if body.model not in {m.name for m in spec.models}:
        raise ApiError(422, "unknown_model", f"comparison {cid!r} has no model {body.model!r}",
                       {"id": cid, "model": body.model})
    x = _query_rows(body, spec, settings.max_query_rows)
    chunks = await store.applied_rows(cid, meta.sequence)
    rows = cat_rows(chunks)
    if not chunks or rows.count == 0:
        raise ApiError(409, "no_data", "the comparison has no processed rows yet",
                       {"id": cid, "sequence": meta.sequence})
    seed = body.seed
    generator = (derive_generator(spec.seed, body.model, "expectation", meta.sequence)
                 if seed is None else derive_generator(seed))

    def compute() -> dict[str, Any]:
        runner = runner_for(spec, spec.model(body.model))
        try:
            result = runner.expectation(rows, body.functional, x, body.repetitions, body.alpha,
                                        generator)
        except (EstimatorError, torch.linalg.LinAlgError) as exc:
            # A partial posterior the estimator could not compute: the data and this model's
            # settings, not the server, are at fault; nothing was stored.
            raise ApiError(422, "estimation_failed", str(exc), {"model": body.model}) from None
        return {
            "model": body.model,
            "functional": body.functional,
            "estimate": result.estimate.tolist(),
            "stderr": result.stderr.tolist(),
            "repetitions": result.repetitions,
            "alpha": result.alpha,
            "n_observations": result.n_observations,
            "rows_used": result.rows_used,
            "sequence": meta.sequence,
        }

    return await asyncio.to_thread(compute)


def _query_rows(body: ExpectationIn, spec: ComparisonSpec, max_rows: int) -> torch.Tensor | None:
    """The rows of a predictive functional (None for the others), given in the one field that
    the comparison's form takes: ``x`` by position, ``columns`` or ``records`` by name."""
    if body.functional != "predictive":
        return None
    given = [name for name in ROW_FIELDS if getattr(body, name) is not None]
    if len(given) != 1:
        raise ApiError(422, "invalid_request", 'functional "predictive" needs its rows in one '
                       f"of x, columns or records, got {len(given)}", {"field": given})
    if given == ["x"]:
        return parse_query(body.x, spec, max_rows)
    if spec.design is None:
        raise matrix_form(spec)
    return parse_named_query({given[0]: getattr(body, given[0])}, spec, max_rows)
