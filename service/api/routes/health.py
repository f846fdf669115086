"""Liveness, readiness (Redis reachable; on a Redis Cluster, every slot served) and Prometheus
metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from modelcompare.service.api.deps import MetricsDep, ReadinessDep, SettingsDep, StoreDep
from modelcompare.service.api.errors import error_response, error_responses
from modelcompare.service.api.responses import Status
from modelcompare.service.store.health import ClusterDegraded, Unreachable

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Status)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=None,
    responses={200: {"model": Status, "description": "Redis answers (on a Redis Cluster: every "
                     "slot is served)"}, **error_responses(503)},
)
async def readyz(readiness: ReadinessDep) -> dict[str, str] | Response:
    """503 ``redis_unreachable`` when Redis does not answer; on a Redis Cluster, 503
    ``cluster_degraded`` naming the reason while some slot is not served (a master down without
    a replica to take over, or one suspected down: its comparisons cannot be read or written)."""
    try:
        await readiness.check()
    except ClusterDegraded as exc:
        return error_response(503, "cluster_degraded", f"Redis Cluster: {exc}",
                              headers={"Retry-After": "1"})
    except Unreachable as exc:
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
async def metrics(store: StoreDep, registry: MetricsDep, settings: SettingsDep) -> Response:
    """The process's counters, the chunks queued in all and the queue depths of the
    ``metrics_max_comparisons`` comparisons with the deepest queues, and per model and rule the
    figures of the newest ``metrics_max_comparisons`` comparisons (docs/guide/decisions.md): a
    comparison is a label value, so their number is bounded."""
    depths = await store.queue_depths()
    registry.queued_chunks.set(sum(depths.values()))
    registry.queue_depth.clear()
    deepest = sorted(depths.items(), key=lambda item: item[1], reverse=True)
    for cid, depth in deepest[: settings.metrics_max_comparisons]:
        registry.queue_depth.labels(comparison=cid).set(depth)
    registry.comparisons.update(await store.exported(settings.metrics_max_comparisons))
    return Response(generate_latest(registry.registry), media_type=CONTENT_TYPE_LATEST)
