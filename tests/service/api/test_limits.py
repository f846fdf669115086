"""The service's configurable limits (docs/guide/limits.md): each refused with a 422 that names the
limit, before anything is allocated, and with nothing changed in Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
import torch
from service_helpers import assert_error, comparison_body, wait_for_sequence
from service_server import Server, StartServer, snapshot

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.online.dimension import pools_mass
from modelcompare.models import LinearRegression
from modelcompare.service.limits import state_bytes
from modelcompare.service.store.comparisons import Comparisons
from modelcompare.service.store.keys import Keys, index_key
from modelcompare.service.store.meta import Meta


def stored_keys(server: Server) -> list[bytes]:
    return sorted(server.redis().scan_iter(match=f"{server.settings.key_prefix}:*"))


def stored(server: Server, cid: str) -> dict[str, Any]:
    """``snapshot`` without the worker's lease, which comes and goes while a worker polls."""
    lease = Keys(server.settings.key_prefix, cid).lease.encode()
    found = snapshot(server, cid)
    return {**found, "keys": [key for key in found["keys"] if key != lease]}


def regression(name: str, dim: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "family": "linear_regression", "config": {"dim": dim}, **extra}


def assert_limit(response: Any, limit: str) -> None:
    assert_error(response, 422, "limit_exceeded")
    error = response.json()["error"]
    assert error["details"]["limit"] == limit
    assert limit in error["message"] and f"MODELCOMPARE_{limit.upper()}" in error["message"]
    assert error["details"]["value"] > error["details"]["allowed"]


# (limit, create body) with the limits of the server below: each one over exactly that limit.
OVER_LIMITS: list[tuple[str, dict[str, Any]]] = [
    ("max_models", {"models": [regression(f"m{i}", 1) for i in range(4)]}),
    ("max_x_dim", {"models": [regression("a", 1)], "x_dim": 65}),
    ("max_x_dim", {"models": [regression("a", 1, columns=[64])]}),
    ("max_x_dim", {"models": [regression("a", 1)], "x_dim": 10**18}),
    ("max_x_dim", {"models": [regression("a", 2, columns=[0, 10**9])]}),
    ("max_comparison_parameters", {"models": [regression("a", 30), regression("b", 30)],
                                   "estimator": {"method": "sgais", "particles": 2}}),
    # exact: a mean and a covariance, 45 × 46 × 8 B + 2 KiB = 18,608 B
    ("max_state_bytes", {"models": [regression("a", 45)], "estimator": {"method": "exact"}}),
    # (64 particles × (20 + 3) + 56) × 8 B + 2 KiB = 14,272 B per model
    ("max_state_bytes", {"models": [regression("a", 19), regression("b", 19)],
                         "estimator": {"method": "sgais", "particles": 64}}),
    # (2 × 32 particles × (40 + 3) + 2 × 96) × 8 B + 2 KiB = 25,600 B (one island: 13,824 B)
    ("max_state_bytes", {"models": [regression("a", 39)],
                         "estimator": {"method": "sgais", "particles": 32, "islands": 2}}),
]
LIMITS = {"max_models": 3, "max_x_dim": 64, "max_comparison_parameters": 50,
          "max_state_bytes": 16_384}


@pytest.mark.parametrize(("method", "settings"), [
    ("sgais", {"particles": 16}),
    ("sgais", {"particles": 8, "islands": 3}),
    ("sgais", {"particles": 8, "islands": 2, "mass_clouds": 3, "full_batch_rows": 20}),
    ("sequential", {"particles": 16}),
    ("minibatch_mh", {"particles": 16}),
    ("ais", {"particles": 16}),
    ("nested", {"live_points": 32, "parallel": 8}),
    ("hybrid", {"particles": 16, "live_points": 32, "nested_parallel": 8}),
    ("exact", {}),
])
@pytest.mark.slow
@pytest.mark.parametrize("inputs", [1, 6])
def test_state_bytes_bounds_what_every_method_stores(
    method: str, settings: dict[str, Any], inputs: int,
) -> None:
    """``max_state_bytes`` counts ``state_bytes``: it must not undercount the stored record (in
    a small model's state the log-weights and the Eves weigh up to 3.5× its parameters; a
    pooled mass matrix adds D² per system once the exact phase is over)."""
    model = LinearRegression(inputs, noise_std=1.0, prior_std=1.0)
    tracker = OnlineEvidence(model, method=method, seed=0, **settings)
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        x = torch.randn(50, inputs, generator=generator, dtype=torch.float64)
        tracker.update(x, torch.randn(50, generator=generator, dtype=torch.float64))

    stored = len(tracker.state_bytes())
    bound = state_bytes(model.param_dim, tracker.estimator.particles, settings.get("islands", 1),
                        pools_mass(tracker.estimator.settings, model.param_dim))

    assert stored <= bound
    if method == "sgais":  # the bound is its layout, not a loose ceiling
        assert stored >= 0.5 * bound


def test_state_bytes_counts_the_pool_a_larger_model_gets_by_default() -> None:
    """Past 44 parameters SG-AIS pools its mass matrix without being asked (``mass_clouds``
    scaled to ⌈2D / 44⌉): the bound counts the D × D pool its state then stores."""
    model = LinearRegression(44, noise_std=1.0, prior_std=1.0)  # 45 parameters
    tracker = OnlineEvidence(model, seed=0, particles=16, full_batch_rows=20)
    assert pools_mass(tracker.estimator.settings, model.param_dim)
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        x = torch.randn(30, 44, generator=generator, dtype=torch.float64)
        tracker.update(x, torch.randn(30, generator=generator, dtype=torch.float64))
    assert tracker.state.mass.covariance.shape == (45, 45)
    stored = len(tracker.state_bytes())
    assert stored > state_bytes(model.param_dim, 16)  # what the bound said before the pool
    assert stored <= state_bytes(model.param_dim, 16, 1, pools_mass(tracker.estimator.settings,
                                                                   model.param_dim))


def test_creates_over_a_limit_are_422_naming_it_and_store_nothing(
    start_server: StartServer,
) -> None:
    server = start_server("local", **LIMITS)
    with server.client() as client:
        for limit, body in OVER_LIMITS:
            response = client.post("/v1/comparisons", json={"name": "big", **body})
            assert_limit(response, limit)
            assert stored_keys(server) == [], limit
        within = {"name": "ok", "models": [regression(f"m{i}", 1) for i in range(3)],
                  "x_dim": 64, "estimator": {"method": "exact"}}
        assert client.post("/v1/comparisons", json=within).status_code == 201


def test_added_models_over_a_limit_are_422_and_change_nothing(start_server: StartServer) -> None:
    server = start_server("local", **LIMITS)
    with server.client() as client:
        body = {"name": "c", "models": [regression("a", 20), regression("b", 20)], "x_dim": 40,
                "estimator": {"method": "sgais", "particles": 16}}
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        before = stored(server, cid)
        path = f"/v1/comparisons/{cid}/models"
        assert_limit(client.post(path, json=regression("c", 11)), "max_comparison_parameters")
        assert_limit(client.post(path, json=regression("c", 1, columns=[10**9])), "max_x_dim")
        assert client.post(path, json=regression("c", 1)).status_code == 201
        after_third = stored(server, cid)
        assert after_third != before
        assert_limit(client.post(path, json=regression("d", 1)), "max_models")
        assert stored(server, cid) == after_third


def test_default_limits_refuse_huge_sizes_at_once(start_server: StartServer) -> None:
    server = start_server("local")
    with server.client() as client:
        for limit, body in (
            ("max_x_dim", {"models": [regression("a", 1)], "x_dim": 4_000_000}),
            ("max_x_dim", {"models": [regression("a", 1, columns=[10**9])]}),
            ("max_models", {"models": [regression(f"m{i}", 1) for i in range(51)]}),
            # 20 exact linear regressions of dim 999: 20 × 1000 × 1001 × 8 B = 160 MB of state
            ("max_state_bytes", {"models": [regression(f"m{i}", 999) for i in range(20)],
                                 "estimator": {"method": "exact"}}),
        ):
            assert_limit(client.post("/v1/comparisons", json={"name": "big", **body}), limit)
        assert stored_keys(server) == []


def test_query_rows_over_the_limit_are_422(start_server: StartServer) -> None:
    server = start_server("local", max_query_rows=5)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        client.post(f"/v1/comparisons/{cid}/chunks?wait=true",
                    json={"x": [[0.1, 0.2, 0.3, 0.4]], "y": [1.0]})
        before = stored(server, cid)
        rows = [[0.0, 0.0, 0.0, 0.0]] * 6
        assert_limit(client.post(f"/v1/comparisons/{cid}/predict", json={"x": rows}),
                     "max_query_rows")
        assert_limit(client.post(f"/v1/comparisons/{cid}/expectation",
                                 json={"model": "right", "functional": "predictive", "x": rows}),
                     "max_query_rows")
        assert client.post(f"/v1/comparisons/{cid}/predict",
                           json={"x": rows[:5]}).status_code == 200
        assert stored(server, cid) == before


def test_a_create_interrupted_after_its_script_leaves_nothing(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply after the create script is lost (Redis gone midway): the comparison it wrote
    is removed again, so a 503 means nothing was created."""
    server = start_server("local")
    index = index_key(server.settings.key_prefix).encode()
    real_sadd = aioredis.Redis.sadd

    async def lost(self: aioredis.Redis, name: Any, *values: Any) -> Any:
        if str(name).encode() == index:
            raise redis.ConnectionError("injected: connection lost after the create script")
        return await real_sadd(self, name, *values)

    monkeypatch.setattr(aioredis.Redis, "sadd", lost)
    with server.client() as client:
        response = client.post("/v1/comparisons", json=comparison_body())
        assert_error(response, 503)
        assert stored_keys(server) == []
        monkeypatch.setattr(aioredis.Redis, "sadd", real_sadd)
        assert client.post("/v1/comparisons", json=comparison_body()).status_code == 201
        assert len(stored_keys(server)) > 1


def test_a_model_added_mid_stream_must_accept_every_stored_and_queued_row(
    start_server: StartServer,
) -> None:
    server = start_server("local", embedded_worker=False)  # no worker: chunks stay queued
    body = {"name": "c", "estimator": {"method": "exact"}, "x_dim": 1,
            "models": [regression("line", 1)]}
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        path = f"/v1/comparisons/{cid}/models"
        for chunk in ({"x": [[0.0], [1.0]], "y": [1.0, 0.0]}, {"x": [[2.0]], "y": [1.0]},
                      {"x": [[0.0], [1.0], [2.0]], "y": [1.0, 0.5, -3.7]}):
            assert client.post(f"/v1/comparisons/{cid}/chunks", json=chunk).status_code == 202
        before = stored(server, cid)
        for model, row, value in (({"name": "coin", "family": "beta_bernoulli"}, 1, "y = 0.5"),
                                  ({"name": "counts", "family": "gamma_poisson"}, 1, "y = 0.5")):
            response = client.post(path, json=model)
            assert_error(response, 422, "invalid_request")
            details = response.json()["error"]["details"]
            assert details == {"model": model["name"], "sequence": 3, "row": row,
                               "value": value}, details
            assert f"row {row} (from 0) of chunk 3" in response.json()["error"]["message"]
        assert stored(server, cid) == before
        wide = regression("wide", 1)
        assert client.post(path, json=wide).status_code == 201


def test_a_model_added_after_applied_rows_names_the_stored_row(start_server: StartServer) -> None:
    server = start_server("local")
    body = {"name": "c", "estimator": {"method": "exact"}, "x_dim": 1,
            "models": [regression("line", 1)]}
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        for chunk in ({"x": [[0.0]], "y": [2.0]}, {"x": [[0.0], [1.0]], "y": [1.0, -3.7]}):
            assert client.post(f"/v1/comparisons/{cid}/chunks?wait=true",
                               json=chunk).status_code == 200
        before = stored(server, cid)
        assert before["stream"] == 0 and before["blocks"] == 2  # applied, nothing queued
        response = client.post(f"/v1/comparisons/{cid}/models",
                               json={"name": "counts", "family": "gamma_poisson"})
        assert_error(response, 422, "invalid_request")
        assert response.json()["error"]["details"] == {
            "model": "counts", "sequence": 2, "row": 1, "value": "y = -3.7"}
        assert stored(server, cid) == before
        added = client.post(f"/v1/comparisons/{cid}/models",
                            json={"name": "other", "family": "linear_regression",
                                  "config": {"dim": 1, "noise_std": 2.0}})
        assert added.status_code == 201


def test_query_bodies_have_their_own_byte_limit(start_server: StartServer) -> None:
    server = start_server("local", max_query_body_bytes=1000)
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=comparison_body()).json()["id"]
        before = stored(server, cid)
        rows = {"x": [[0.5, 0.5, 0.5, 0.5]] * 100}  # about 2,000 bytes
        for path in ("predict", "expectation"):
            response = client.post(f"/v1/comparisons/{cid}/{path}",
                                   json={**rows, "model": "right", "functional": "predictive"}
                                   if path == "expectation" else rows)
            assert_error(response, 413, "too_large")
            assert response.json()["error"]["details"] == {"limit": 1000}
        assert stored(server, cid) == before
        chunk = {"x": [[0.5, 0.5, 0.5, 0.5]] * 100, "y": [0.0] * 100}  # chunks: MAX_BODY_BYTES
        accepted = client.post(f"/v1/comparisons/{cid}/chunks", json=chunk)
        assert accepted.status_code == 202
        assert (accepted.json()["sequence"], accepted.json()["rows"]) == (1, 100)
        # the worker may already have applied and trimmed it: read the outcome, not the stream
        assert wait_for_sequence(client, cid, 1)["n_observations"] == 100


def test_a_chunk_of_many_tiny_rows_is_refused_before_parsing(start_server: StartServer) -> None:
    server = start_server("local", max_rows=5)
    with server.client() as client:
        body = {"name": "c", "models": [regression("a", 1)], "x_dim": 1,
                "estimator": {"method": "exact"}}
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        before = stored(server, cid)
        chunk = b'{"x": [' + b"[0]," * 20_000 + b'[0]], "y": [' + b"0," * 20_000 + b"0]}"
        response = client.post(f"/v1/comparisons/{cid}/chunks", content=chunk,
                               headers={"content-type": "application/json"})
        assert_error(response, 413, "too_large")
        assert response.json()["error"]["details"] == {"limit": 5}
        assert stored(server, cid) == before


@pytest.mark.parametrize("then_remove", [False, True], ids=["added", "added-then-removed"])
def test_a_chunk_validated_before_a_model_was_added_is_validated_again(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch, then_remove: bool,
) -> None:
    """The race: a chunk is validated against the spec, a model that refuses it is added, then
    the chunk is queued. The ingest script sees that models were added since and the API
    validates the chunk again, against the new model too. Removing the old model as well
    leaves the spec as many models as the chunk was validated against: the script counts the
    models ever added, so it still sees the change."""
    server = start_server("local", embedded_worker=False)
    real_meta = Comparisons.meta
    held: dict[str, Any] = {"record": False, "replay": False, "meta": None}

    async def meta(self: Comparisons, cid: str) -> Meta:
        if held["replay"]:
            held["replay"] = False
            return held["meta"]  # the spec as it was before the model was added
        found = await real_meta(self, cid)
        if held["record"]:
            held["record"], held["meta"] = False, found
        return found

    monkeypatch.setattr(Comparisons, "meta", meta)
    body = {"name": "c", "estimator": {"method": "exact"}, "x_dim": 1,
            "models": [regression("line", 1)]}
    with server.client() as client:
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        held["record"] = True
        client.get(f"/v1/comparisons/{cid}")
        added = client.post(f"/v1/comparisons/{cid}/models",
                            json={"name": "counts", "family": "gamma_poisson"})
        assert added.status_code == 201
        if then_remove:
            assert client.delete(f"/v1/comparisons/{cid}/models/line").status_code == 200
        before = stored(server, cid)
        held["replay"] = True
        response = client.post(f"/v1/comparisons/{cid}/chunks",
                               json={"x": [[0.0], [1.0]], "y": [2.0, -3.7]})
        assert not held["replay"]  # the stale spec was used first
        assert_error(response, 422, "invalid_chunk")
        assert response.json()["error"]["details"] == {"model": "counts", "row": 1,
                                                       "value": "y = -3.7"}
        assert stored(server, cid) == before
        good = client.post(f"/v1/comparisons/{cid}/chunks", json={"x": [[0.0]], "y": [2.0]})
        assert good.status_code == 202


def test_chunks_past_the_comparisons_bytes_are_422_and_change_nothing(
    start_server: StartServer,
) -> None:
    # a chunk block is 9 header bytes plus rows × (x columns + y) × 8: 169 B for 10 rows of x_dim 1
    server = start_server("local", max_comparison_bytes=400)
    with server.client() as client:
        body = {"name": "c", "models": [regression("a", 1)], "x_dim": 1,
                "estimator": {"method": "exact"}}
        cid = client.post("/v1/comparisons", json=body).json()["id"]
        chunk = {"x": [[float(i)] for i in range(10)], "y": [0.5 * i for i in range(10)]}
        path = f"/v1/comparisons/{cid}/chunks"
        first = client.post(path, json=chunk, headers={"Idempotency-Key": "first"})
        assert first.status_code == 202
        assert client.post(f"{path}?wait=true", json=chunk).status_code == 200  # 338 B held
        before = stored(server, cid)
        response = client.post(path, json=chunk)
        assert_limit(response, "max_comparison_bytes")
        assert response.json()["error"]["details"] == {
            "limit": "max_comparison_bytes", "value": 507, "allowed": 400}
        assert "338" in response.json()["error"]["message"]
        assert stored(server, cid) == before
        # a retry of an accepted chunk is still answered as its duplicate, and a chunk that fits
        # is still taken
        again = client.post(path, json=chunk, headers={"Idempotency-Key": "first"})
        assert again.status_code == 202 and again.json()["duplicate"] is True
        small = client.post(f"{path}?wait=true", json={"x": [[1.0]], "y": [2.0]})
        assert small.status_code == 200
        assert small.json()["models"][0]["n_observations"] == 21
