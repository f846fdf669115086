"""While Redis is down the API answers 503 with Retry-After (not a 500), and recovers with it."""

from __future__ import annotations

from pathlib import Path

import httpx
from fault_processes import Deployment

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
