"""Prior model probabilities are normalised in log space (service/evidence.py)."""

from __future__ import annotations

import pytest
from service_helpers import assert_error
from service_server import StartServer

from modelcompare.service.evidence import prior_probabilities
from modelcompare.service.schemas import ComparisonSpec, ModelSpec


def spec(*weights: float) -> ComparisonSpec:
    models = [ModelSpec(name=f"m{i}", family="beta_bernoulli", config={"alpha": 1.0, "beta": 1.0},
                        columns=[], prior_weight=w) for i, w in enumerate(weights)]
    return ComparisonSpec(id="c", name="c", seed=0, created_at=0.0, x_dim=0, has_y=True,
                          estimator={"method": "exact"}, models=models)


@pytest.mark.parametrize(("weights", "expected"), [
    ((1e308, 1e308), (0.5, 0.5)),  # their sum overflows to inf
    ((1e308, 1e308, 5e307), (0.4, 0.4, 0.2)),
    ((5e-324, 1e-323), (1 / 3, 2 / 3)),  # subnormal
    ((0.25, 0.75), (0.25, 0.75)),
])
def test_prior_probabilities_do_not_overflow(weights: tuple[float, ...],
                                             expected: tuple[float, ...]) -> None:
    found = prior_probabilities(spec(*weights))
    assert list(found.values()) == pytest.approx(expected, rel=1e-12)


def test_a_prior_probability_above_one_is_refused(start_server: StartServer) -> None:
    server = start_server("embedded")
    models = [{"name": n, "family": "beta_bernoulli", "prior_probability": 1e308} for n in "ab"]
    with server.client() as client:
        response = client.post("/v1/comparisons", json={"name": "p", "models": models})
        assert_error(response, 422, "invalid_request")
        assert client.get("/v1/comparisons").json()["comparisons"] == []
