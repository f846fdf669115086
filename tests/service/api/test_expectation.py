"""POST /v1/comparisons/{id}/expectation over real HTTP, and the MC-CAVI ``elbo`` field of the
evidence body."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from service_helpers import assert_error, by_name, chunks, regression_data
from service_server import StartServer

from modelcompare.estimators import Rows
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.estimators.functionals.posterior_functionals import (
    Functional,
    conjugate_expectation,
)
from modelcompare.estimators.variational.mccavi import mccavi_elbo
from modelcompare.models import LinearRegression, LinearRegressionUnknownNoise

BODY = {
    "name": "expectation",
    "seed": 3,
    "models": [
        {"name": "known", "family": "linear_regression", "config": {"dim": 3}},
        {"name": "unknown", "family": "linear_regression_unknown_noise", "config": {"dim": 2},
         "columns": [0, 2]},
    ],
    "estimator": {"method": "exact"},
    "x_dim": 4,
}


def exact_expectation(model, x: np.ndarray, y: np.ndarray, functional: Functional) -> np.ndarray:
    xt, yt = torch.tensor(x), torch.tensor(y)
    stats = model.update_stats(model.prior_stats(), xt, yt)
    return conjugate_expectation(model, stats, functional).numpy()


def create_with_rows(client, rows: int) -> tuple[str, np.ndarray, np.ndarray]:
    x, y = regression_data(rows, seed=4)
    cid = client.post("/v1/comparisons", json=BODY).json()["id"]
    bodies = chunks(x, y, 200)
    for body in bodies[:-1]:
        assert client.post(f"/v1/comparisons/{cid}/chunks", json=body).status_code == 202
    done = client.post(f"/v1/comparisons/{cid}/chunks?wait=true", json=bodies[-1])
    assert done.status_code == 200
    return cid, x, y


@pytest.mark.slow
def test_expectation_is_unbiased_against_the_exact_posterior(start_server: StartServer) -> None:
    with start_server("embedded").client() as client:
        cid, x, y = create_with_rows(client, 1000)
        url = f"/v1/comparisons/{cid}/expectation"
        query = x[:3].tolist()
        cases = [("known", "mean", None, LinearRegression(3), [0, 1, 2]),
                 ("unknown", "second_moment", None, LinearRegressionUnknownNoise(2), [0, 2]),
                 ("known", "predictive", query, LinearRegression(3), [0, 1, 2])]
        for name, kind, qx, model, columns in cases:
            reply = client.post(url, json={"model": name, "functional": kind, "x": qx,
                                           "repetitions": 300, "seed": 1})
            assert reply.status_code == 200, reply.text
            body = reply.json()
            view = None if qx is None else torch.tensor(x[:3][:, columns])
            exact = exact_expectation(model, x[:, columns], y, Functional(kind, view))
            estimate, stderr = np.array(body["estimate"]), np.array(body["stderr"])
            assert estimate.shape == exact.shape
            assert np.abs((estimate - exact) / stderr).max() < 4.0, (name, kind, estimate, exact)
            assert body["n_observations"] == 1000 and body["repetitions"] == 300
            assert body["alpha"] == 0.5 and 300 * 16 <= body["rows_used"] < 300 * 1000
        # Same seed, same answer; another seed, another draw of the estimator.
        again = client.post(url, json={"model": "known", "functional": "mean", "seed": 1,
                                       "repetitions": 50}).json()
        same = client.post(url, json={"model": "known", "functional": "mean", "seed": 1,
                                      "repetitions": 50}).json()
        other = client.post(url, json={"model": "known", "functional": "mean", "seed": 2,
                                       "repetitions": 50}).json()
        assert again == same and again["estimate"] != other["estimate"]


def test_expectation_errors(start_server: StartServer) -> None:
    server = start_server("embedded")
    with server.client() as client:
        empty = client.post("/v1/comparisons", json=BODY).json()["id"]
        reply = client.post(f"/v1/comparisons/{empty}/expectation",
                            json={"model": "known", "functional": "mean"})
        assert_error(reply, 409, "no_data")
        cid, _, _ = create_with_rows(client, 200)
        url = f"/v1/comparisons/{cid}/expectation"
        assert_error(client.post("/v1/comparisons/nope/expectation",
                                 json={"model": "known", "functional": "mean"}), 404)
        assert_error(client.post(url, json={"model": "nope", "functional": "mean"}), 422,
                     "unknown_model")
        bad = [
            {"model": "known", "functional": "median"},
            {"model": "known", "functional": "predictive"},  # needs x
            {"model": "known", "functional": "predictive", "x": [[1.0, 2.0]]},  # 4 columns
            {"model": "known", "functional": "predictive", "x": [[1.0, 2.0, 3.0, "a"]]},
            {"model": "known", "functional": "mean", "alpha": 1.0},
            {"model": "known", "functional": "mean", "alpha": 0.0},
            {"model": "known", "functional": "mean", "repetitions": 0},
            {"model": "known", "functional": "mean", "extra": 1},
            {"functional": "mean"},
        ]
        for body in bad:
            assert_error(client.post(url, json=body), 422)
        assert client.get(f"/v1/comparisons/{cid}/evidence").json()["version"] == 1


@pytest.mark.slow
def test_evidence_carries_the_mccavi_elbo(start_server: StartServer) -> None:
    """``elbo`` where the family has one (≤ the exact log Z), null elsewhere; refreshed when n
    doubles, with the rows it covers in ``elbo_n_observations``."""
    server = start_server("embedded")
    with server.client() as client:
        cid, x, y = create_with_rows(client, 1000)
        evidence = client.get(f"/v1/comparisons/{cid}/evidence").json()
        models = by_name(evidence)
        assert models["known"]["elbo"] is None
        unknown = models["unknown"]
        # Chunks of 200: n = 200, 400, 600, 800, 1000 crosses 2^7, 2^8, 2^9 (at 600) only.
        assert unknown["elbo_n_observations"] == 600
        model = LinearRegressionUnknownNoise(2)
        xt, yt = torch.tensor(x[:600][:, [0, 2]]), torch.tensor(y[:600])
        exact = float(model.batch_log_evidence(xt, yt))
        # The worker's MC-CAVI run, replayed with its generator (seed, model, sequence 3).
        replay = mccavi_elbo(model, Rows(xt, yt), derive_generator(3, "unknown", 3, "elbo"))
        assert unknown["elbo"] == pytest.approx(replay.elbo, rel=1e-12)
        assert unknown["elbo"] < exact < unknown["elbo"] + 0.5
        more = [client.post(f"/v1/comparisons/{cid}/chunks?wait=true",
                            json={"x": x[:100].tolist(), "y": y[:100].tolist()}).json()
                for _ in range(2)]
        refreshed, kept = (by_name(body)["unknown"] for body in more)
        assert refreshed["elbo_n_observations"] == 1100  # n crossed 1024
        assert kept["elbo"] == refreshed["elbo"] and kept["elbo_n_observations"] == 1100
        assert kept["n_observations"] == 1200
