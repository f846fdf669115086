"""Ingest chunks; read evidence, weights, the evidence trace; BMA predictions."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import torch
from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from modelcompare.service.api.broadcast import Closing
from modelcompare.service.api.deps import (
    BroadcasterDep,
    MetricsDep,
    RequestIdentity,
    SettingsDep,
    StoreDep,
)
from modelcompare.service.api.errors import (
    ApiError,
    error_responses,
    not_found,
    require_families,
)
from modelcompare.service.api.ingest import json_or, parse_chunk
from modelcompare.service.api.named_bodies import CHUNK_MEDIA_TYPES, CSV, QUERY_MEDIA_TYPES
from modelcompare.service.api.query_rows import parse_predict
from modelcompare.service.api.responses import (
    ChunkAccepted,
    Evidence,
    History,
    Prediction,
    Weights,
    returns,
)
from modelcompare.service.engine import runner_for
from modelcompare.service.evidence import mix, prediction_json
from modelcompare.service.limits import LimitExceeded
from modelcompare.service.store.codec import block_digest
from modelcompare.service.store.trace import MODEL_FIELDS

router = APIRouter(prefix="/v1/comparisons/{cid}", tags=["data"])


def _body(matrix: str, media_types: tuple[str, ...]) -> dict[str, Any]:
    """A request body the route parses itself (ingest.parse_chunk, query_rows.parse_predict),
    not FastAPI: JSON rows by position (``matrix``) or by name, or a table of ``media_types``."""
    forms = [{"$ref": f"#/components/schemas/{name}"}
             for name in (matrix, "NamedColumns", "NamedRecords")]
    tables = {media: {"schema": {"type": "string"} if media == CSV else
                      {"type": "string", "format": "binary"}} for media in media_types}
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"oneOf": forms}}, **tables}}}


@router.post("/chunks", status_code=202, openapi_extra=_body("ChunkIn", CHUNK_MEDIA_TYPES),
             dependencies=[Depends(json_or(*CHUNK_MEDIA_TYPES))],
             responses={
                 202: {"model": ChunkAccepted, "description": "queued (or, with ?wait=true, not "
                       "applied within wait_timeout: `processed` false)"},
                 200: {"model": Evidence, "description": "?wait=true: applied; the evidence"},
                 **error_responses(404, 409, 413, 415, 422, 503)})
async def ingest_chunk(
    cid: str,
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    broadcaster: BroadcasterDep,
    metrics: MetricsDep,
    identity: RequestIdentity,
    wait: bool = False,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JSONResponse:
    """Validate and queue a chunk (202 with its sequence); ``?wait=true``: 200 with evidence
    (and ``duplicate``: true when the Idempotency-Key had already been accepted). A comparison
    whose models read named columns takes them as JSON columns or records, CSV, Parquet or an
    Arrow IPC stream; any other, JSON rows ``x`` and ``y``."""
    body = await request.body()  # at most max_body_bytes: see ingest.BodyLimit
    content_type = request.headers.get("content-type")
    for _ in range(20):  # validated again when a model was added meanwhile (status "stale")
        meta = await store.meta(cid)
        block, rows = await run_in_threadpool(parse_chunk, body, meta.spec, settings.max_rows,
                                              content_type)
        status, sequence, recorded = await store.ingest(cid, block, rows, block_digest(block),
                                                        idempotency_key, identity,
                                                        meta.models_added,
                                                        settings.max_comparison_bytes)
        if status != "stale":
            break
    else:
        raise ApiError(409, "busy", "models kept being added to the comparison; retry",
                       {"id": cid})
    if status == "missing":
        raise not_found(cid)
    if status == "full":
        raise comparison_full(sequence, len(block), settings.max_comparison_bytes)
    if status == "conflict":
        raise ApiError(409, "idempotency_conflict",
                       f"this Idempotency-Key was used with a different body (chunk {sequence}, "
                       f"{recorded if recorded is not None else 'unknown'} rows)",
                       {"idempotency_key": idempotency_key, "sequence": sequence,
                        "rows": recorded})
    if status == "accepted":
        metrics.ingested.inc()
    accepted = {"sequence": sequence, "rows": rows, "duplicate": status == "duplicate"}
    if not wait:
        return JSONResponse(accepted, status_code=202)
    with broadcaster.subscribe(cid) as subscription:
        evidence = await store.evidence(cid)
        deadline = time.monotonic() + settings.wait_timeout
        while evidence["sequence"] < sequence and not evidence.get("halted_at"):
            try:
                update = await subscription.next(evidence["version"],
                                                 max(deadline - time.monotonic(), 0.0))
            except (TimeoutError, Closing):  # not applied in time, or the server shuts down
                return JSONResponse({**accepted, "processed": False}, status_code=202)
            if update is None:
                raise not_found(cid)
            evidence = update
    if evidence["sequence"] < sequence:  # halted on a dead-lettered chunk: queued, not applied
        return JSONResponse({**accepted, "processed": False, "status": evidence["status"],
                             "status_reason": evidence["status_reason"]}, status_code=202)
    return JSONResponse({**evidence, "duplicate": accepted["duplicate"]}, status_code=200)


def comparison_full(held: int, block: int, allowed: int) -> ApiError:
    """422 ``limit_exceeded`` (``LimitExceeded``, as for every limit): the chunk would take the
    comparison's stored chunks past ``max_comparison_bytes``."""
    exc = LimitExceeded("max_comparison_bytes", held + block, allowed,
                        f"bytes of chunks ({held:,} held, this chunk {block:,}; start a new "
                        "comparison)")
    return ApiError(422, "limit_exceeded", str(exc), exc.details)


@router.get("/evidence", response_class=Response, responses={
    200: {"model": Evidence, "description": "the newest committed evidence"},
    **error_responses(404, 503)})
async def get_evidence(cid: str, store: StoreDep) -> Response:
    """Per model: log_evidence, log_evidence_stderr, n_observations, ess, posterior_probability,
    the windowed evidence (``window``) and whether log Z deserves its error bar
    (``reliability``)."""
    return Response(await store.shown_evidence(cid), media_type="application/json")


@router.get("/weights", **returns(Weights), responses=error_responses(404, 503))
async def get_weights(cid: str, store: StoreDep) -> dict[str, Any]:
    evidence = await store.evidence(cid)
    return {
        "weights": {m["name"]: m["posterior_probability"] for m in evidence["models"]},
        "version": evidence["version"],
        "sequence": evidence["sequence"],
    }


@router.get("/history", **returns(History), responses=error_responses(404, 503))
async def get_history(cid: str, store: StoreDep) -> dict[str, Any]:
    """Evidence trace per model, one point per applied chunk (for plots): n, log Z ± stderr,
    ESS, annealing steps and the fraction of SGHMC trajectories undone as diverged per model,
    and the estimator time of each chunk (``points``).
    Points stored before those diagnostics were recorded carry null for them."""
    points = await store.trace(cid)
    models: dict[str, dict[str, list[Any]]] = {}
    for point in points:
        for name, value in point["models"].items():
            series = models.setdefault(name, {"sequence": [], **{k: [] for k in MODEL_FIELDS}})
            series["sequence"].append(point["sequence"])
            for key in MODEL_FIELDS:
                series[key].append(value.get(key))
    return {"models": models, "points": points}


@router.post("/predict", **returns(Prediction), openapi_extra=_body("PredictIn",
                                                                     QUERY_MEDIA_TYPES),
             dependencies=[Depends(json_or(*QUERY_MEDIA_TYPES))],
             responses=error_responses(400, 404, 413, 415, 422, 503))
async def predict(cid: str, request: Request, store: StoreDep,
                  settings: SettingsDep) -> dict[str, Any]:
    """BMA predictive at the query rows (``x``, or by name: JSON columns or records, or an
    Arrow IPC stream): the mixture over models by posterior probability, and each part."""
    body = await request.body()  # at most max_query_body_bytes: see ingest.BodyLimit
    spec, evidence, states = await store.states(cid)
    require_families(spec)
    x = await run_in_threadpool(parse_predict, body, request.headers.get("content-type"), spec,
                                settings.max_query_rows)

    def compute() -> dict[str, Any]:
        parts, mixture_parts = [], []
        for summary in evidence["models"]:
            part: dict[str, Any] = {"name": summary["name"],
                                    "posterior_probability": summary["posterior_probability"]}
            try:
                runner = runner_for(spec, spec.model(summary["name"]))
                prediction = runner.predict(runner.load(states[summary["name"]]), x)
            except (ValueError, ArithmeticError, torch.linalg.LinAlgError) as exc:
                # One model's numerical failure (a degenerate state) is that model's error.
                part["error"] = str(exc)
            else:
                part.update(prediction_json(prediction))
                if summary["posterior_probability"]:
                    mixture_parts.append((summary["posterior_probability"], prediction))
            parts.append(part)
        mixture = mix(mixture_parts) if mixture_parts else None
        return {"version": evidence["version"], "mixture": mixture, "models": parts}

    return await asyncio.to_thread(compute)
