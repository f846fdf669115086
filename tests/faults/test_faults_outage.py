"""While Redis is down the API answers 503 with Retry-After (not a 500), and recovers with it."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from fault_processes import Deployment

from modelcompare.service.client import Client, ModelCompareError

SPEC = {"name": "outage", "seed": 0, "estimator": {"method": "exact"},
        "models": [{"name": "m", "family": "linear_regression", "config": {"dim": 1}}]}


def test_redis_outage_is_a_503_and_the_api_recovers(tmp_path: Path) -> None:
    deployment = Deployment(tmp_path, workers=0)
    deployment.start()
    try:
        with httpx.Client(base_url=deployment.api.url, timeout=30) as client:
            cid = client.post("/v1/comparisons", json=SPEC).json()["id"]
            deployment.redis.kill()
            down = client.get(f"/v1/comparisons/{cid}/evidence")
            assert down.status_code == 503
            assert down.headers["retry-after"] == "1"
            assert down.json()["error"]["code"] == "unavailable"
            deployment.redis.start()
            up = client.get(f"/v1/comparisons/{cid}/evidence")
            assert up.status_code == 200, up.text
    finally:
        deployment.stop()


def test_the_client_rides_out_an_outage_and_reports_an_unknown_outcome(tmp_path: Path) -> None:
    """Redis restarts while a chunk is sent: the client's retries (same Idempotency-Key) get
    it in once. Out of retries, the 503's error says the outcome is unknown and carries the
    key; sending again with it once Redis is back counts the chunk once."""
    deployment = Deployment(tmp_path, workers=0)
    deployment.start()
    try:
        with Client(deployment.api.url, retries=8) as api:
            cid = api.create_comparison(SPEC)["id"]
            deployment.redis.kill()
            restart = threading.Timer(1.0, deployment.redis.start)
            restart.start()
            reply = api.ingest(cid, [[1.0]], [0.5])  # 503s while Redis is down, then accepted
            restart.join()
            assert reply == {"sequence": 1, "rows": 1, "duplicate": False}
            deployment.redis.kill()
            with Client(deployment.api.url, retries=1) as brief, \
                    pytest.raises(ModelCompareError) as unknown:
                brief.ingest(cid, [[2.0]], [1.5])
            error = unknown.value
            assert (error.status, error.code) == (503, "unavailable")
            assert error.idempotency_key is not None and error.outcome_unknown
            assert error.message == (
                "the data store is unreachable; retry later; the outcome is unknown: the chunk "
                "may or may not have been accepted. Send it again with idempotency_key="
                f"{error.idempotency_key!r} (header Idempotency-Key): the server applies a chunk "
                "once per key")
            deployment.redis.start()
            for _ in range(2):
                api.ingest(cid, [[2.0]], [1.5], idempotency_key=error.idempotency_key)
            assert api.get_comparison(cid)["ingested"] == 2
    finally:
        deployment.stop()
