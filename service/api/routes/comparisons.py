"""Create, list, describe and delete comparisons; add a model mid-stream."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Response
from fastapi.concurrency import run_in_threadpool

from estimators import state_to_bytes
from service.api.deps import AccessDep, StoreDep
from service.api.errors import ApiError, error_responses, not_found
from service.api.ingest import json_body
from service.api.responses import ComparisonList, ComparisonOut, ModelAdded, returns
from service.engine import Runner
from service.evidence import evidence_body, model_summaries
from service.schemas import ComparisonIn, ComparisonSpec, ModelIn, comparison_spec, prior_weights
from service.store.comparisons import Meta

router = APIRouter(prefix="/v1/comparisons", tags=["comparisons"])


def describe(meta: Meta) -> dict[str, Any]:
    spec = meta.spec
    total = sum(m.prior_weight for m in spec.models)
    return {
        "id": spec.id,
        "name": spec.name,
        "seed": spec.seed,
        "created_at": spec.created_at,
        "x_dim": spec.x_dim,
        "has_y": spec.has_y,
        "estimator": spec.estimator,
        "models": [
            {
                "name": m.name,
                "family": m.family,
                "config": m.config,
                "columns": m.columns,
                "prior_probability": m.prior_weight / total,
            }
            for m in spec.models
        ],
        "version": meta.version,
        "sequence": meta.sequence,
        "ingested": meta.ingested,
        "status": meta.status,
        "status_reason": meta.status_reason,
    }


def initial(spec: ComparisonSpec, name: str, catching_up: bool) -> tuple[dict[str, Any], bytes]:
    """A model's summary and state before it has seen any row."""
    runner = Runner(spec, spec.model(name))
    state = runner.init_state()
    summary = {**runner.summary(state, None), "catching_up": catching_up, "failed": None,
               "sequence": 0}
    return summary, state_to_bytes(state)


def _invalid(exc: ValueError) -> ApiError:
    return ApiError(422, "invalid_request", str(exc))


@router.post("", status_code=201, **returns(ComparisonOut), dependencies=[Depends(json_body)],
             responses=error_responses(400, 413, 415, 422, 503))
async def create_comparison(body: ComparisonIn, store: StoreDep) -> dict[str, Any]:
    try:
        spec = comparison_spec(body, uuid.uuid4().hex, time.time())
    except ValueError as exc:
        raise _invalid(exc) from None
    parts = await run_in_threadpool(lambda: {m.name: initial(spec, m.name, False)
                                             for m in spec.models})
    evidence = evidence_body(spec, {n: s for n, (s, _) in parts.items()}, version=0, sequence=0,
                             n_observations=0, last_error=None)
    await store.create(spec, evidence, {n: state for n, (_, state) in parts.items()})
    return describe(Meta(spec, 0, 0, 0))


@router.get("", **returns(ComparisonList), responses=error_responses(503))
async def list_comparisons(store: StoreDep, access: AccessDep) -> dict[str, Any]:
    """The comparisons the caller's API key may read (all of them when keys are off), newest
    first."""
    described = []
    for cid in await store.ids():
        try:
            meta = await store.meta(cid)
        except LookupError:
            continue  # deleted meanwhile
        if access.allows("read", cid, meta.spec.name):
            described.append(describe(meta))
    described.sort(key=lambda c: c["created_at"], reverse=True)
    return {"comparisons": described}


@router.get("/{cid}", **returns(ComparisonOut), responses=error_responses(404, 503))
async def get_comparison(cid: str, store: StoreDep) -> dict[str, Any]:
    return describe(await store.meta(cid))


@router.delete("/{cid}", status_code=204, responses=error_responses(404, 503))
async def delete_comparison(cid: str, store: StoreDep) -> Response:
    await store.delete(cid)
    return Response(status_code=204)


@router.post("/{cid}/models", status_code=201, **returns(ModelAdded),
             dependencies=[Depends(json_body)],
             responses=error_responses(400, 404, 409, 413, 415, 422, 503))
async def add_model(cid: str, body: ModelIn, store: StoreDep) -> dict[str, Any]:
    """Add a model; when chunks were already applied it replays them before joining."""
    for _ in range(20):
        meta = await store.meta(cid)
        if any(m.name == body.name for m in meta.spec.models):
            raise ApiError(409, "conflict", f"model {body.name!r} exists", {"name": body.name})
        try:
            (weight,) = prior_weights([body], [m.prior_weight for m in meta.spec.models])
            model = body.spec(weight)
            meta.spec.check_model(model)
        except ValueError as exc:
            raise _invalid(exc) from None
        spec = meta.spec.model_copy(update={"models": [*meta.spec.models, model]})
        catching_up = meta.sequence > 0
        summary, state = await run_in_threadpool(initial, spec, model.name, catching_up)
        current = await store.evidence(cid)
        if current["version"] != meta.version:
            continue
        evidence = evidence_body(
            spec,
            {**model_summaries(current), model.name: summary},
            version=meta.version + 1,
            sequence=current["sequence"],
            n_observations=current["n_observations"],
            last_error=current["last_error"],
            status_reason=current.get("status_reason"),
            skipped_chunks=current.get("skipped_chunks", 0),
            halted_at=current.get("halted_at"),
        )
        result = await store.add_model(meta, spec, evidence, model, state, catching_up)
        if result == 1:
            return {"model": model.name, "catching_up": catching_up, "evidence": evidence}
        if result == -1:
            raise not_found(cid)
        if result == -2:
            raise ApiError(409, "conflict", f"model {body.name!r} exists", {"name": body.name})
    raise ApiError(409, "busy", "the comparison kept changing; retry", {"id": cid})
