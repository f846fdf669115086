"""The HTTP contract end to end: real uvicorn, real Redis (embedded and 127.0.0.1:6379)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from scipy import stats
from service_helpers import (
    TRUE_WEIGHTS,
    assert_error,
    by_name,
    chunks,
    comparison_body,
    exact_log_evidence,
    regression_data,
    wait_for_sequence,
)
from service_server import Server, StartServer

from modelcompare.models import LinearRegression
from modelcompare.service.store.keys import Keys

COLUMNS = {"right": [0, 1, 2], "too_few": [0, 1], "wrong_noise": [0, 1, 2]}
CONFIGS = {"right": {"dim": 3}, "too_few": {"dim": 2}, "wrong_noise": {"dim": 3, "noise_std": 3.0}}


def test_exact_loop_matches_the_conjugate_oracle(server: Server) -> None:
    x, y = regression_data(300)
    with server.client() as client:
        created = client.post("/v1/comparisons", json=comparison_body("exact"))
        assert created.status_code == 201
        cid = created.json()["id"]
        assert [m["columns"] for m in created.json()["models"]] == list(COLUMNS.values())
        bodies = chunks(x, y, 100)
        for body in bodies[:-1]:
            accepted = client.post(f"/v1/comparisons/{cid}/chunks", json=body)
            assert accepted.status_code == 202
            assert accepted.json()["rows"] == 100
        done = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=bodies[-1])
        assert done.status_code == 200
        evidence = done.json()
        counters = (evidence["version"], evidence["sequence"], evidence["n_observations"])
        assert counters == (3, 3, 300)
        models = by_name(evidence)
        for name, columns in COLUMNS.items():
            expected = exact_log_evidence(CONFIGS[name], x, y, columns)
            assert models[name]["log_evidence"] == pytest.approx(expected, rel=1e-10, abs=1e-8)
            assert models[name]["n_observations"] == 300
            assert models[name]["log_evidence_stderr"] == 0.0
        total = sum(m["posterior_probability"] for m in models.values())
        assert total == pytest.approx(1.0)
        assert models["right"]["posterior_probability"] > 0.99
        weights = client.get(f"/v1/comparisons/{cid}/weights").json()["weights"]
        assert weights == {n: m["posterior_probability"] for n, m in models.items()}
        assert evidence.pop("duplicate") is False  # the ?wait=true reply: the evidence, and
        assert client.get(f"/v1/comparisons/{cid}/evidence").json() == evidence  # whether a retry
        history = client.get(f"/v1/comparisons/{cid}/history").json()
        trace = history["models"]["right"]
        assert trace["n_observations"] == [100, 200, 300]
        assert trace["sequence"] == [1, 2, 3]
        # the diagnostics the dashboard plots are stored too (exact: no particles, no steps)
        assert trace["ess"] == [None] * 3 and trace["annealing_steps"] == [None] * 3
        assert trace["diverged_fraction"] == [None] * 3
        assert all(p["compute_seconds"] > 0 for p in history["points"])
        first = exact_log_evidence(CONFIGS["right"], x[:100], y[:100], COLUMNS["right"])
        assert trace["log_evidence"][0] == pytest.approx(first, rel=1e-10)
        assert trace["log_evidence"][-1] == models["right"]["log_evidence"]
        query = [[0.5, -1.0, 2.0, 0.1], [0.0, 0.3, -0.7, 1.2]]  # the stream is 4 columns wide
        predicted = client.post(f"/v1/comparisons/{cid}/predict", json={"x": query})
        assert predicted.status_code == 200, predicted.text
        parts = {p["name"]: p for p in predicted.json()["models"]}
        oracle = LinearRegression(**CONFIGS["right"])
        stats = oracle.update_stats(
            oracle.prior_stats(),
            torch.as_tensor(x[:, COLUMNS["right"]]),
            torch.as_tensor(y, dtype=torch.float64),
        )
        picked = torch.tensor(query, dtype=torch.float64)[:, COLUMNS["right"]]
        want = oracle.predict_from_stats(stats, picked)
        assert parts["right"]["mean"] == pytest.approx(want.mean.tolist(), rel=1e-9)
        assert parts["right"]["variance"] == pytest.approx(want.variance.tolist(), rel=1e-9)


@pytest.mark.slow
def test_sgais_loop_gives_evidence_near_exact_and_a_bma_prediction(server: Server) -> None:
    x, y = regression_data(120, seed=3)
    with server.client() as client:
        body = comparison_body("sgais", particles=32, steps=10)
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        for chunk in chunks(x, y, 60):
            response = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk)
            assert response.status_code == 200
        models = by_name(response.json())
        for name, columns in COLUMNS.items():
            expected = exact_log_evidence(CONFIGS[name], x, y, columns)
            # a smoke check of the SG-AIS path; its accuracy is benchmarked elsewhere
            assert abs(models[name]["log_evidence"] - expected) < 8.0, name
            assert models[name]["log_evidence_stderr"] >= 0.0
            assert 1.0 <= models[name]["ess"] <= 32.0
        assert models["wrong_noise"]["posterior_probability"] < 1e-3
        query = [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 5.0]]
        predicted = client.post(f"/v1/comparisons/{cid}/predict", json={"x": query}).json()
        mixture = predicted["mixture"]
        truth = np.array(query)[:, :3] @ TRUE_WEIGHTS + 0.3
        assert np.allclose(mixture["mean"], truth, atol=0.6)
        parts = {p["name"]: p for p in predicted["models"]}
        assert set(parts) == set(COLUMNS)
        mixed = sum(p["posterior_probability"] * np.array(p["mean"]) for p in parts.values())
        assert np.allclose(mixture["mean"], mixed, atol=1e-9)
        assert all(v > 1.0 for v in mixture["variance"])  # at least the noise variance


def test_an_intercept_only_baseline_has_the_exact_evidence(server: Server) -> None:
    """``dim: 0``: y = b + ε, whose evidence is N(y; 0, σ²I + τ²11ᵀ), beside a model with
    inputs on one stream; and on a stream of y alone (no x at all)."""
    x, y = regression_data(80, seed=21)
    cov = np.eye(80) + np.ones((80, 80))  # σ = τ = 1
    exact = float(stats.multivariate_normal(np.zeros(80), cov).logpdf(y))
    baseline = {"name": "baseline", "family": "linear_regression", "config": {"dim": 0}}
    with server.client() as client:
        both = {**comparison_body("exact"), "models": [baseline, *comparison_body()["models"]]}
        cid = client.post("/v1/comparisons", json=both).json()["id"]
        for chunk in chunks(x, y, 30):
            evidence = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunk).json()
        assert by_name(evidence)["baseline"]["log_evidence"] == pytest.approx(exact, rel=1e-10)
        assert by_name(evidence)["baseline"]["posterior_probability"] < 1e-6  # y depends on x
        parts = client.post(f"/v1/comparisons/{cid}/predict",
                            json={"x": [[0.0, 1.0, 2.0, 3.0]]}).json()["models"]
        assert by_name({"models": parts})["baseline"]["mean"] == pytest.approx([y.sum() / 81])
        alone = {"name": "y only", "estimator": {"method": "exact"}, "models": [baseline]}
        cid = client.post("/v1/comparisons", json=alone).json()["id"]
        done = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json={"y": y.tolist()})
        assert done.json()["models"][0]["log_evidence"] == pytest.approx(exact, rel=1e-10)


def test_list_describe_and_delete_removes_every_key(server: Server) -> None:
    x, y = regression_data(40)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunks(x, y, 40)[0],
                    headers={"Idempotency-Key": "k1"})
        later = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        listed = client.get("/v1/comparisons").json()["comparisons"]
        ids = [c["id"] for c in listed]
        assert ids.index(later) < ids.index(cid)  # newest first
        assert [c["created_at"] for c in listed] == sorted(
            (c["created_at"] for c in listed), reverse=True)
        described = client.get(f"/v1/comparisons/{cid}").json()
        assert (described["name"], described["sequence"], described["ingested"]) == (
            "regression", 1, 1)
        assert sum(m["prior_probability"] for m in described["models"]) == pytest.approx(1.0)
        store = server.redis()
        pattern = Keys(server.settings.key_prefix, cid).pattern
        assert len(list(store.scan_iter(match=pattern))) >= 6
        assert client.delete(f"/v1/comparisons/{cid}").status_code == 204
        assert list(store.scan_iter(match=pattern)) == []
        assert_error(client.get(f"/v1/comparisons/{cid}"), 404, "not_found")
        assert cid not in [c["id"] for c in client.get("/v1/comparisons").json()["comparisons"]]
        assert_error(client.delete(f"/v1/comparisons/{cid}"), 404, "not_found")


def test_unknown_ids_and_routes_get_404_json(server: Server) -> None:
    with server.client() as client:
        base = "/v1/comparisons/nope"
        for method, path, body in [
            ("GET", base, None), ("DELETE", base, None), ("GET", f"{base}/evidence", None),
            ("GET", f"{base}/weights", None), ("GET", f"{base}/history", None),
            ("POST", f"{base}/chunks", {"y": [1.0]}), ("POST", f"{base}/predict", {"x": [[1.0]]}),
            ("POST", f"{base}/models", {"name": "m", "family": "beta_bernoulli"}),
            ("DELETE", f"{base}/models/m", None),
            ("GET", "/v1/nothing-here", None),
        ]:
            assert_error(client.request(method, path, json=body), 404, "not_found")


@pytest.mark.slow
def test_model_added_mid_stream_catches_up_to_the_same_bits(start_server: StartServer) -> None:
    server = start_server("embedded")
    x, y = regression_data(150, seed=5)
    body = comparison_body("sgais", seed=7, particles=32, steps=10)
    late = body["models"].pop()
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        for chunk in chunks(x, y, 50):
            client.post(f"/v1/comparisons/{cid}/chunks", json=chunk)
        wait_for_sequence(client, cid, 3)
        added = client.post(f"/v1/comparisons/{cid}/models", json=late)
        assert added.status_code == 201
        assert added.json()["catching_up"] is True
        assert by_name(added.json()["evidence"])[late["name"]]["posterior_probability"] is None
        assert_error(client.post(f"/v1/comparisons/{cid}/models", json=late), 409, "conflict")
        evidence = wait_for_sequence(client, cid, 3)
        joined = by_name(evidence)[late["name"]]
        assert joined["n_observations"] == 150 and joined["catching_up"] is False
        assert sum(m["posterior_probability"] for m in evidence["models"]) == pytest.approx(1.0)
        full = comparison_body("sgais", seed=7, particles=32, steps=10)
        reference = client.post("/v1/comparisons", json=full).json()["id"]
        for chunk in chunks(x, y, 50):
            client.post(f"/v1/comparisons/{reference}/chunks", json=chunk)
        wait_for_sequence(client, reference, 3)
    store = server.redis()
    late_state = store.hget(Keys("mc", cid).states, late["name"])
    assert late_state == store.hget(Keys("mc", reference).states, late["name"])
    assert math.isfinite(joined["log_evidence"])


@pytest.mark.slow
def test_model_removed_mid_stream_leaves_the_others_bits(start_server: StartServer) -> None:
    """A removed model leaves the probabilities, which renormalise over the others from their
    log Z and prior weights; the others go on to the bits of a comparison that never had it;
    the last model cannot go; a name freed by a removal can be added again."""
    server = start_server("embedded")
    x, y = regression_data(150, seed=5)
    body = comparison_body("sgais", seed=7, particles=32, steps=10)
    without = {**body, "models": [m for m in body["models"] if m["name"] != "too_few"]}
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        bodies = chunks(x, y, 50)
        for chunk in bodies[:2]:
            client.post(f"/v1/comparisons/{cid}/chunks", json=chunk)
        before = wait_for_sequence(client, cid, 2)
        removed = client.delete(f"/v1/comparisons/{cid}/models/too_few")
        assert removed.status_code == 200
        evidence = removed.json()["evidence"]
        assert removed.json()["model"] == "too_few"
        assert evidence["version"] == before["version"] + 1
        models = by_name(evidence)
        assert set(models) == {"right", "wrong_noise"}
        log_z = {n: by_name(before)[n]["log_evidence"] for n in models}
        assert {n: m["log_evidence"] for n, m in models.items()} == log_z
        top = max(log_z.values())
        total = sum(math.exp(v - top) for v in log_z.values())  # equal prior weights
        for name, model in models.items():
            assert model["prior_probability"] == pytest.approx(0.5)
            assert model["posterior_probability"] == pytest.approx(
                math.exp(log_z[name] - top) / total, rel=1e-12)
        assert client.get(f"/v1/comparisons/{cid}/evidence").json() == evidence
        described = client.get(f"/v1/comparisons/{cid}").json()
        assert [m["name"] for m in described["models"]] == ["right", "wrong_noise"]
        assert_error(client.delete(f"/v1/comparisons/{cid}/models/too_few"), 404, "not_found")
        assert_error(client.delete("/v1/comparisons/nope/models/right"), 404, "not_found")
        # a dot segment percent-encoded reaches the model route, not the comparison
        assert_error(client.delete(f"/v1/comparisons/{cid}/models/%2E%2E"), 404, "not_found")
        assert client.get(f"/v1/comparisons/{cid}").status_code == 200
        client.post(f"/v1/comparisons/{cid}/chunks", json=bodies[2])
        wait_for_sequence(client, cid, 3)
        reference = client.post("/v1/comparisons", json=without).json()["id"]
        for chunk in bodies:
            client.post(f"/v1/comparisons/{reference}/chunks", json=chunk)
        wait_for_sequence(client, reference, 3)
        store = server.redis()
        states = store.hgetall(Keys("mc", cid).states)
        assert states == store.hgetall(Keys("mc", reference).states)
        assert client.delete(f"/v1/comparisons/{cid}/models/right").status_code == 200
        assert_error(client.delete(f"/v1/comparisons/{cid}/models/wrong_noise"), 409,
                     "conflict")
        added = client.post(f"/v1/comparisons/{cid}/models", json=body["models"][1])
        assert added.status_code == 201 and added.json()["catching_up"] is True
        joined = by_name(wait_for_sequence(client, cid, 3))  # and caught up
        assert joined["too_few"]["n_observations"] == 150
        assert sum(m["posterior_probability"] for m in joined.values()) == pytest.approx(1.0)


def test_health_readiness_metrics_and_docs(server: Server) -> None:
    x, y = regression_data(20)
    with server.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready"}
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunks(x, y, 20)[0])
        # The worker counts a chunk after its commit, which the waiting request may see first.
        deadline = time.monotonic() + 10
        processed = "modelcompare_chunks_processed_total 1.0"
        while processed not in (text := client.get("/metrics").text):
            assert time.monotonic() < deadline, text
            time.sleep(0.05)
        assert "modelcompare_chunks_ingested_total 1.0" in text
        assert "modelcompare_chunks_processed_total 1.0" in text
        assert "modelcompare_update_seconds_count 1.0" in text
        assert f'modelcompare_queue_depth{{comparison="{cid}"}} 0.0' in text
        assert client.get("/docs").status_code == 200
        paths = client.get("/openapi.json").json()["paths"]
        assert "/v1/comparisons/{cid}/chunks" in paths


@pytest.mark.slow
def test_wait_times_out_with_202_when_no_worker_runs(start_server: StartServer) -> None:
    server = start_server("embedded", embedded_worker=False, wait_timeout=0.3)
    x, y = regression_data(10)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        response = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=chunks(x, y, 10)[0])
        assert response.status_code == 202
        assert response.json() == {"sequence": 1, "rows": 10, "duplicate": False,
                                   "processed": False}
        assert client.get(f"/v1/comparisons/{cid}/evidence").json()["sequence"] == 0
