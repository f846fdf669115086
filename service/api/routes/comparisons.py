"""Create, list, describe and delete comparisons; add or remove a model mid-stream."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.concurrency import run_in_threadpool

from modelcompare.estimators import state_to_bytes
from modelcompare.service.api.changes import retried
from modelcompare.service.api.deps import AccessDep, RequestIdentity, SettingsDep, StoreDep
from modelcompare.service.api.errors import (
    ApiError,
    error_responses,
    not_found,
    require_families,
)
from modelcompare.service.api.ingest import json_body
from modelcompare.service.api.responses import (
    ComparisonList,
    ComparisonOut,
    ModelAdded,
    ModelRemoved,
    returns,
)
from modelcompare.service.api.routes.webhooks import check_webhooks
from modelcompare.service.engine import model_warnings, runner_for
from modelcompare.service.evidence import evidence_body, prior_probabilities
from modelcompare.service.formula import check_stored
from modelcompare.service.limits import LimitExceeded
from modelcompare.service.progress import ComparisonProgress, ModelProgress
from modelcompare.service.reducers import next_version, started, with_model, without_model
from modelcompare.service.schemas import (
    BaseModelIn,
    ComparisonIn,
    ComparisonSpec,
    ModelIn,
    ModelSpec,
    comparison_spec,
    prior_weights,
)
from modelcompare.service.store.comparisons import Comparisons
from modelcompare.service.store.listing import BadCursor
from modelcompare.service.store.meta import Meta
from modelcompare.service.validation import first_stored_refusal

router = APIRouter(prefix="/v1/comparisons", tags=["comparisons"])


def describe(meta: Meta) -> dict[str, Any]:
    spec = meta.spec
    priors = prior_probabilities(spec)
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
                "package": m.package,
                "version": m.version,
                "target": m.stored_target(),
                "config": m.config,
                "columns": m.columns,
                "formula": m.formula,
                "prior_probability": priors[m.name],
                "warnings": model_warnings(spec, m),
            }
            for m in spec.models
        ],
        "variables": spec.variables,
        "target_column": spec.target_column,
        "design": spec.design,
        "design_formulas": spec.design_formulas,
        "version": meta.version,
        "sequence": meta.sequence,
        "ingested": meta.ingested,
        "status": meta.status,
        "status_reason": meta.reason,
        "rules": [r.public() for r in spec.rules],
    }


def initial(spec: ComparisonSpec, name: str, catching_up: bool) -> tuple[ModelProgress, bytes]:
    """A model's progress and state before it has seen any row."""
    runner = runner_for(spec, spec.model(name))
    state = runner.init_state()
    return started(runner.reading(state, None), catching_up), state_to_bytes(state)


def _check_reading(spec: ComparisonSpec, model: BaseModelIn) -> None:
    """A model reads a named comparison's columns by formula, a matrix one's by index:
    ``ValueError`` otherwise, or naming what its formula reads that was never stored."""
    if spec.design is None and model.formula is not None:
        raise ValueError(f"model {model.name!r}: this comparison's rows are matrices x without "
                         'names; give "columns" (indices into x), not "formula"')
    if spec.design is not None and model.formula is None:
        raise ValueError(f"model {model.name!r}: this comparison reads named columns "
                         f"({', '.join(spec.variables or [])}); give a \"formula\", not "
                         '"columns"')
    if model.formula is not None:
        check_stored(model.formula, spec)


def _invalid(exc: ValueError) -> ApiError:
    if isinstance(exc, LimitExceeded):
        return ApiError(422, "limit_exceeded", str(exc), exc.details)
    return ApiError(422, "invalid_request", str(exc))


@router.post("", status_code=201, **returns(ComparisonOut), dependencies=[Depends(json_body)],
             responses=error_responses(400, 413, 415, 422, 503))
async def create_comparison(body: ComparisonIn, store: StoreDep,
                            settings: SettingsDep) -> dict[str, Any]:
    try:
        spec = comparison_spec(body, uuid.uuid4().hex, time.time(), settings.limits)
    except ValueError as exc:
        raise _invalid(exc) from None
    await check_webhooks(body.rules, settings)
    parts = await run_in_threadpool(lambda: {m.name: initial(spec, m.name, False)
                                             for m in spec.models})
    progress = ComparisonProgress(version=0, sequence=0, n_observations=0,
                                  models={n: model for n, (model, _) in parts.items()})
    await store.create(spec, progress, evidence_body(spec, progress),
                       {n: state for n, (_, state) in parts.items()})
    return describe(Meta(spec, 0, 0, 0))


LIST_LIMIT, LIST_LIMIT_MAX = 50, 500  # a page's comparisons: default, maximum
LIST_EXAMINE = 1000  # comparisons one page looks at, at most, when the key's scope hides some


@router.get("", **returns(ComparisonList), responses=error_responses(422, 503))
async def list_comparisons(
    store: StoreDep,
    access: AccessDep,
    limit: int = Query(LIST_LIMIT, ge=1, le=LIST_LIMIT_MAX,
                       description="comparisons per page at most"),
    cursor: str | None = Query(None, max_length=200,
                               description="the next_cursor of the previous page"),
) -> dict[str, Any]:
    """The comparisons the caller's API key may read (all of them when keys are off), newest
    first, one page at a time: follow ``next_cursor`` until it is null. Comparisons created
    after the first page are not in later pages; deleted ones drop out. With a key whose scope
    hides most comparisons a page may hold fewer than ``limit`` (even none) before the end."""
    visible = None if access.everything("read") else (
        lambda cid, name: access.allows("read", cid, name))
    try:
        page = await store.page(limit, cursor, visible, LIST_EXAMINE)
    except BadCursor as exc:
        raise ApiError(422, "invalid_request", str(exc), {"cursor": cursor}) from None
    return {"comparisons": [describe(meta) for meta in page.comparisons],
            "next_cursor": page.next_cursor}


@router.get("/{cid}", **returns(ComparisonOut), responses=error_responses(404, 503))
async def get_comparison(cid: str, store: StoreDep) -> dict[str, Any]:
    return describe(await store.meta(cid))


@router.delete("/{cid}", status_code=204, responses=error_responses(404, 503))
async def delete_comparison(cid: str, store: StoreDep, request: RequestIdentity) -> Response:
    await store.delete(cid, request)
    return Response(status_code=204)


async def _check_stored_rows(store: Comparisons, meta: Meta, spec: ComparisonSpec,
                             model: ModelSpec) -> None:
    """422 naming the first stored or queued row ``model`` refuses (pages of chunks, each
    checked off the event loop)."""
    page: list[tuple[int, bytes]] = []
    async for item in store.chunks(meta.spec.id, meta.sequence):
        page.append(item)
        if len(page) == 64:
            await _check_page(spec, model, page)
            page = []
    await _check_page(spec, model, page)


async def _check_page(spec: ComparisonSpec, model: ModelSpec,
                      page: list[tuple[int, bytes]]) -> None:
    found = await run_in_threadpool(first_stored_refusal, spec, model, page)
    if found is not None:
        sequence, refusal = found
        raise ApiError(422, "invalid_request", refusal.describe(
            f"row {refusal.row} (from 0) of chunk {sequence}, already ingested"),
            {"model": refusal.model, "sequence": sequence, "row": refusal.row,
             "value": refusal.value})


@router.post("/{cid}/models", status_code=201, **returns(ModelAdded),
             dependencies=[Depends(json_body)],
             responses=error_responses(400, 404, 409, 413, 415, 422, 503))
async def add_model(cid: str, body: ModelIn, store: StoreDep, settings: SettingsDep,
                    request: RequestIdentity) -> dict[str, Any]:
    """Add a model; when chunks were already applied it replays them before joining."""
    async def attempt() -> dict[str, Any] | None:
        meta = await store.meta(cid)
        if any(m.name == body.name for m in meta.spec.models):
            raise ApiError(409, "conflict", f"model {body.name!r} exists", {"name": body.name})
        require_families(meta.spec)  # the limits check builds every model
        try:
            _check_reading(meta.spec, body)
            settings.limits.check_shape(len(meta.spec.models) + 1, None, body.columns or [])
            (weight,) = prior_weights([body], [m.prior_weight for m in meta.spec.models])
            model = body.spec(weight, meta.spec.design)
            spec = meta.spec.model_copy(update={"models": [*meta.spec.models, model]})
            settings.limits.check(spec)
        except ValueError as exc:
            raise _invalid(exc) from None
        await _check_stored_rows(store, meta, spec, model)
        catching_up = meta.sequence > 0
        joining, state = await run_in_threadpool(initial, spec, model.name, catching_up)
        current = await store.progress(cid)
        if current.version != meta.version:
            return None
        progress = next_version(with_model(current, model.name, joining))
        evidence = evidence_body(spec, progress)
        result = await store.add_model(meta, spec, progress, evidence, model, state, catching_up,
                                       request)
        if result == -1:
            raise not_found(cid)
        if result == -2:
            raise ApiError(409, "conflict", f"model {body.name!r} exists", {"name": body.name})
        return ({"model": model.name, "catching_up": catching_up, "evidence": evidence}
                if result == 1 else None)

    return await retried(cid, attempt)


def _no_model(cid: str, name: str) -> ApiError:
    return ApiError(404, "not_found", f"no model {name!r} in comparison {cid!r}",
                    {"id": cid, "model": name})


@router.delete("/{cid}/models/{name}", **returns(ModelRemoved),
               responses=error_responses(404, 409, 503))
async def remove_model(cid: str, name: str, store: StoreDep,
                       request: RequestIdentity) -> dict[str, Any]:
    """Remove a model: its state goes, and it leaves the probabilities, Bayes factors and
    model-averaged predictions; the other models' states are untouched. Its past points stay in
    the history. The last model cannot go: delete the comparison instead; nor can a model that
    a decision rule names: remove the rule first."""
    async def attempt() -> dict[str, Any] | None:
        meta = await store.meta(cid)
        if all(m.name != name for m in meta.spec.models):
            raise _no_model(cid, name)
        if len(meta.spec.models) == 1:
            raise ApiError(409, "conflict", f"{name!r} is the comparison's only model; delete "
                           "the comparison instead", {"id": cid, "model": name})
        # checked on the spec of the version the removal is a compare-and-set on: a rule added
        # meanwhile makes it stale, and it is checked again
        if naming := [rule.name for rule in meta.spec.rules if name in rule.when.models()]:
            raise ApiError(409, "conflict", f"decision rules name {name!r}: "
                           f"{', '.join(naming)}; remove them first",
                           {"id": cid, "model": name, "rules": naming})
        spec = meta.spec.model_copy(
            update={"models": [m for m in meta.spec.models if m.name != name]})
        current = await store.progress(cid)
        if current.version != meta.version:
            return None
        progress = next_version(without_model(current, name))
        evidence = evidence_body(spec, progress)
        result = await store.remove_model(meta, spec, progress, evidence, name,
                                          current.models[name].catching_up, request)
        if result == -1:
            raise not_found(cid)
        if result == -2:
            raise _no_model(cid, name)
        return {"model": name, "evidence": evidence} if result == 1 else None

    return await retried(cid, attempt)
