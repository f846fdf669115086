"""One small comparison run step by step on real Redis, for the tests of the progress record:
three SG-AIS regressions fed 8 chunks, a fourth model added after chunk 4 (it catches up one
block per step), a 60-row evidence window so that the windows move. ``old_evidence.json`` beside
the worker tests holds what the code before the progress record stored for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from service_helpers import chunks, comparison_body, regression_data
from service_server import Server, drain, make_worker

from modelcompare.service.store.keys import Keys

FIXTURE = Path(__file__).parent / "worker" / "fixtures" / "old_evidence.json"
SGAIS = {"particles": 16, "steps": 4, "hmc_moves": 1, "leapfrog_steps": 5}
WINDOW_ROWS = 60
LATE = {"name": "late", "family": "linear_regression", "config": {"dim": 1}, "columns": [3]}


def run_scenario(server: Server) -> dict[str, Any]:
    """The stored evidence bodies (parsed) while ``late`` catches up and at the end, and the
    trace (GET /history)."""
    store, prefix = server.redis(), server.settings.key_prefix
    worker = make_worker(server, "scenario", batch_chunks=1,
                         evidence_window_rows=WINDOW_ROWS)
    x, y = regression_data(160, seed=5)
    parts = chunks(x, y, 20)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body("sgais", seed=7, **SGAIS))
        cid = cid.json()["id"]
        keys = Keys(prefix, cid)
        for chunk in parts[:4]:
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
        drain(worker, store, keys, 4)
        assert client.post(f"/v1/comparisons/{cid}/models", json=LATE).status_code == 201
        for chunk in parts[4:]:
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
        drain(worker, store, keys, 5)
        catching_up = json.loads(store.get(keys.evidence))
        drain(worker, store, keys, 8)
        while json.loads(store.get(keys.evidence))["models"][-1]["catching_up"]:
            worker.run_once()
        final = json.loads(store.get(keys.evidence))
        history = client.get(f"/v1/comparisons/{cid}/history").json()
    return {"catching_up": catching_up, "final": final, "history": history}
