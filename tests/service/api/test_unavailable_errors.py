"""Every way Redis (or a Redis Cluster shard) can be unavailable answers 503 with Retry-After
and a JSON error naming it, never 500; a websocket closes with 1013."""

from __future__ import annotations

import pytest
import redis.exceptions as rx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from modelcompare.service.api.errors import install

UNAVAILABLE = [
    (rx.ConnectionError("Error 111 connecting"), "unavailable"),
    (rx.TimeoutError("Timeout reading"), "unavailable"),
    (rx.ClusterDownError("The cluster is down"), "cluster_unavailable"),
    (rx.MasterDownError("Link with MASTER is down"), "cluster_unavailable"),
    (rx.TryAgainError("Multiple keys request during rehashing"), "cluster_unavailable"),
    (rx.MovedError("3999 127.0.0.1:6381"), "cluster_unavailable"),
    (rx.AskError("3999 127.0.0.1:6381"), "cluster_unavailable"),
    (rx.ClusterError("TTL exhausted"), "cluster_unavailable"),
    (rx.SlotNotCoveredError('Slot "3999" is not covered by the cluster.'),
     "cluster_unavailable"),
    (rx.RedisClusterException("Redis Cluster cannot be connected"), "cluster_unavailable"),
]


@pytest.mark.parametrize(("error", "code"), UNAVAILABLE,
                         ids=[type(e).__name__ for e, _ in UNAVAILABLE])
def test_unavailable_redis_is_503_with_retry_after(error: Exception, code: str) -> None:
    app = FastAPI()
    install(app)

    @app.get("/boom")
    async def boom() -> None:
        raise error

    reply = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert reply.status_code == 503
    assert reply.headers["Retry-After"] == "1"
    assert reply.json()["error"]["code"] == code
    assert "retry later" in reply.json()["error"]["message"]


def test_other_errors_stay_500() -> None:
    app = FastAPI()
    install(app)

    @app.get("/boom")
    async def boom() -> None:
        raise rx.ResponseError("WRONGTYPE Operation against a key")

    assert TestClient(app, raise_server_exceptions=False).get("/boom").status_code == 500
