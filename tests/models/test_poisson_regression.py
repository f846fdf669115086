"""PoissonRegression (log link) against scipy, autograd, and its evidence by quadrature."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from modelcompare.estimators import OnlineEvidence
from modelcompare.models.base import Model, ModelConfigError
from modelcompare.models.poisson_regression import PoissonRegression

F64 = torch.float64


def make_data(
    generator: torch.Generator, rows: int, dim: int, weights: list[float], bias: float = 0.3
) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(rows, dim, generator=generator, dtype=F64)
    rate = torch.exp(x @ torch.tensor(weights, dtype=F64) + bias)
    return x, torch.poisson(rate, generator=generator)


def test_log_prior_matches_scipy(generator: torch.Generator) -> None:
    model = PoissonRegression(2, prior_std=0.7)
    theta = torch.randn(5, 3, generator=generator, dtype=F64)
    expected = stats.norm.logpdf(theta.numpy(), scale=0.7).sum(1)
    np.testing.assert_allclose(model.log_prior(theta).numpy(), expected, rtol=1e-12)
    torch.testing.assert_close(model.grad_log_prior(theta), Model.grad_log_prior(model, theta))


def test_log_likelihood_matches_scipy(generator: torch.Generator) -> None:
    model = PoissonRegression(3)
    x, y = make_data(generator, 25, 3, [0.5, -0.4, 0.2])
    theta = torch.randn(6, 4, generator=generator, dtype=F64)
    rate = np.exp(theta[:, :3].numpy() @ x.numpy().T + theta[:, 3:].numpy())
    expected = stats.poisson.logpmf(y.numpy(), rate)
    np.testing.assert_allclose(model.log_likelihood(theta, x, y).numpy(), expected, rtol=1e-12)
    value, _ = model.log_likelihood_and_grad(theta, x, y, row_weight=0.5)
    np.testing.assert_allclose(value.numpy(), 0.5 * expected.sum(1), rtol=1e-12)


def test_gradients_match_autograd(generator: torch.Generator) -> None:
    model = PoissonRegression(2)
    x, y = make_data(generator, 20, 2, [0.3, -0.2])
    theta = torch.randn(7, 3, generator=generator, dtype=F64)
    torch.testing.assert_close(
        model.grad_log_likelihood(theta, x, y, row_weight=1.7),
        Model.grad_log_likelihood(model, theta, x, y, row_weight=1.7),
        rtol=1e-10,
        atol=1e-12,
    )
    torch.testing.assert_close(
        model.row_grad_log_likelihood(theta, x, y),
        Model.row_grad_log_likelihood(model, theta, x, y),
        rtol=1e-10,
        atol=1e-12,
    )


def test_sample_prior_moments(generator: torch.Generator) -> None:
    model = PoissonRegression(2, prior_std=2.0)
    n = 20_000
    draws = model.sample_prior(n, generator)
    assert draws.shape == (n, 3)
    assert draws.mean(0).abs().max() < 5 * 2.0 / math.sqrt(n)
    assert (draws.var(0) / 4.0 - 1).abs().max() < 5 * math.sqrt(2 / n)


def test_predict_is_the_weighted_poisson_mixture(generator: torch.Generator) -> None:
    model = PoissonRegression(1)
    x = torch.tensor([[0.0], [1.0]], dtype=F64)
    theta = torch.tensor([[0.0, 0.0], [1.0, math.log(2.0)]], dtype=F64)
    log_weights = torch.log(torch.tensor([0.25, 0.75], dtype=F64))
    prediction = model.predict(theta, log_weights, x)
    rates = torch.tensor([[1.0, 1.0], [2.0, 2.0 * math.e]], dtype=F64)  # (particle, row)
    mean = 0.25 * rates[0] + 0.75 * rates[1]
    spread = 0.25 * (rates[0] - mean) ** 2 + 0.75 * (rates[1] - mean) ** 2
    torch.testing.assert_close(prediction.mean, mean)
    torch.testing.assert_close(prediction.variance, mean + spread)


@pytest.mark.parametrize(
    "counts", [[1.0, -1.0], [0.5, 1.0], [float("nan"), 1.0], [float("inf"), 0.0]]
)
def test_validate_rejects_non_counts(counts: list[float]) -> None:
    model = PoissonRegression(1)
    with pytest.raises(ValueError, match="non-negative integers"):
        model.validate_data(torch.zeros(2, 1, dtype=F64), torch.tensor(counts, dtype=F64))


def test_validate_checks_shapes() -> None:
    model = PoissonRegression(2)
    model.validate_data(torch.zeros(3, 2, dtype=F64), torch.tensor([0.0, 4.0, 1.0]))
    with pytest.raises(ValueError):
        model.validate_data(torch.zeros(3, 2, dtype=F64), torch.tensor([0.0, 4.0]))
    with pytest.raises(ValueError):
        model.validate_data(torch.zeros(3, 1, dtype=F64), torch.tensor([0.0, 4.0, 1.0]))


@pytest.mark.parametrize("config", [{"dim": 0}, {"dim": 2, "prior_std": 0.0}, {"dim": True}])
def test_bad_config_raises(config: dict) -> None:
    with pytest.raises(ModelConfigError):
        PoissonRegression(**config)


def test_config_round_trip_and_no_closed_form() -> None:
    model = PoissonRegression(4, prior_std=0.5)
    assert model.param_dim == 5
    assert PoissonRegression(**model.config()).config() == {"dim": 4, "prior_std": 0.5}
    assert model.closed_form() is None and model.mean_field() is None


def quadrature_log_evidence(model: PoissonRegression, x: torch.Tensor, y: torch.Tensor) -> float:
    """log ∫ p(y | θ) p(θ) dθ for a 1-input model (θ in 2-D) on a 1201² grid over ±6 prior sds:
    its spacing, 0.01, is far below the posterior sd of 80 rows (~0.1)."""
    axis = torch.linspace(-6 * model.prior_std, 6 * model.prior_std, 1201, dtype=F64)
    w, b = torch.meshgrid(axis, axis, indexing="ij")
    theta = torch.stack([w.reshape(-1), b.reshape(-1)], 1)
    log_joint = model.log_prior(theta) + model.log_likelihood(theta, x, y).sum(-1)
    cell = float(axis[1] - axis[0]) ** 2
    return float(torch.logsumexp(log_joint, 0)) + math.log(cell)


@pytest.mark.slow
def test_sgais_evidence_matches_quadrature(generator: torch.Generator) -> None:
    """The family needs nothing from the estimators but the Model interface: SG-AIS's log Z on
    80 rows agrees with 2-D quadrature."""
    model = PoissonRegression(1)
    x, y = make_data(generator, 80, 1, [0.6])
    exact = quadrature_log_evidence(model, x, y)
    tracker = OnlineEvidence(model, particles=64, seed=0)
    for start in range(0, 80, 20):
        tracker.update(x[start : start + 20], y[start : start + 20])
    assert abs(tracker.log_evidence - exact) < 0.3 + 4 * tracker.log_evidence_stderr
    assert tracker.predict(x[:3]).mean.shape == (3,)
