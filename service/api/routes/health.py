"""Liveness, readiness (Redis reachable) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import RedisError

from service.api.deps import MetricsDep, StoreDep
from service.api.errors import error_response, error_responses
from service.api.responses import Status

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Status)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=None,
    responses={200: {"model": Status, "description": "Redis answers"}, **error_responses(503)},
)
async def readyz(store: StoreDep) -> dict[str, str] | Response:
    try:
        await store.client.ping()
    except (RedisError, OSError) as exc:
        return error_response(503, "redis_unreachable", str(exc))
    return {"status": "ready"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        **error_responses(503),
        200: {
            "description": "Prometheus text exposition format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
    },
)
async def metrics(store: StoreDep, registry: MetricsDep) -> Response:
    registry.queue_depth.clear()
    for cid, depth in (await store.queue_depths()).items():
        registry.queue_depth.labels(comparison=cid).set(depth)
    return Response(generate_latest(registry.registry), media_type=CONTENT_TYPE_LATEST)
