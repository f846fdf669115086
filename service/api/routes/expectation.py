"""Debiased posterior expectations of one model over a comparison's stored rows (paths of
partial posteriors, ``estimators.partial_posteriors``)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import torch
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from estimators import EstimatorError
from estimators.history import cat_rows
from estimators.rng import derive_generator
from service.api.deps import StoreDep
from service.api.errors import ApiError
from service.api.ingest import parse_query
from service.engine import Runner
from service.store.codec import decode_block

router = APIRouter(prefix="/v1/comparisons/{cid}", tags=["data"])


class ExpectationIn(BaseModel):
    """``functional``: parameter ``mean``, ``second_moment`` (unconstrained θ, as the model
    defines it) or ``predictive`` at rows ``x``; ``repetitions`` R and truncation rate ``alpha``
    of P(T = t) ∝ 2^(−αt); ``seed`` null: derived from the comparison's seed and sequence."""

    model_config = ConfigDict(extra="forbid")
    model: str
    functional: Literal["mean", "second_moment", "predictive"]
    x: list[list[float]] | None = None
    repetitions: int = Field(default=100, ge=1, le=10_000)
    alpha: float = Field(default=0.5, gt=0.0, lt=1.0)
    seed: int | None = Field(default=None, ge=0, lt=2**63)


@router.post("/expectation")
async def expectation(cid: str, body: ExpectationIn, store: StoreDep) -> dict[str, Any]:
    """Unbiased E[φ(θ) | all stored rows] for one model, averaged over R repetitions."""
    meta = await store.meta(cid)
    spec = meta.spec
    if body.model not in {m.name for m in spec.models}:
        raise ApiError(404, "not_found", f"comparison {cid!r} has no model {body.model!r}",
                       {"id": cid, "model": body.model})
    if body.functional == "predictive" and body.x is None:
        raise ApiError(422, "invalid_request", 'functional "predictive" needs x',
                       {"field": "x"})
    x = parse_query(body.x, spec) if body.functional == "predictive" else None
    blocks = []  # block i holds the rows of chunk i + 1; the first ``sequence`` are applied
    if meta.sequence > 0:
        blocks = await store.client.lrange(store.keys(cid).blocks, 0, meta.sequence - 1)
    rows = cat_rows([decode_block(block) for block in blocks])
    if not blocks or rows.count == 0:
        raise ApiError(409, "no_data", "the comparison has no processed rows yet",
                       {"id": cid, "sequence": meta.sequence})
    seed = body.seed
    generator = (derive_generator(spec.seed, body.model, "expectation", meta.sequence)
                 if seed is None else derive_generator(seed))

    def compute() -> dict[str, Any]:
        runner = Runner(spec, spec.model(body.model))
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
