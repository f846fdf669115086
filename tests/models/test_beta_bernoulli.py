"""BetaBernoulli against scipy, autograd and a quadrature over p."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from modelcompare.models.base import Model, ModelConfigError
from modelcompare.models.beta_bernoulli import BetaBernoulli

CHUNKS = [1, 5, 2, 7, 1, 4]  # uneven on purpose: 20 rows


def make_y(generator: torch.Generator, rows: int = 20, p: float = 0.35) -> torch.Tensor:
    return (torch.rand(rows, generator=generator, dtype=torch.float64) < p).to(torch.float64)


def test_log_prior_matches_scipy_and_integrates_to_one(generator: torch.Generator) -> None:
    model = BetaBernoulli(alpha=2.5, beta=0.7)
    theta = 3 * torch.randn(8, 1, generator=generator, dtype=torch.float64)
    p = special.expit(theta[:, 0].numpy())
    expected = stats.beta.logpdf(p, 2.5, 0.7) + np.log(p * (1 - p))  # + log |dp/dθ|
    np.testing.assert_allclose(model.log_prior(theta).numpy(), expected, rtol=1e-10)

    def density(t: float) -> float:
        return math.exp(model.log_prior(torch.tensor([[t]], dtype=torch.float64)).item())

    assert integrate.quad(density, -np.inf, np.inf)[0] == pytest.approx(1.0, rel=1e-9)


def test_log_likelihood_matches_scipy(generator: torch.Generator) -> None:
    model = BetaBernoulli()
    y = make_y(generator)
    theta = 2 * torch.randn(5, 1, generator=generator, dtype=torch.float64)
    expected = stats.bernoulli.logpmf(y.numpy(), special.expit(theta.numpy()))
    np.testing.assert_allclose(model.log_likelihood(theta, None, y).numpy(), expected, rtol=1e-12)


def test_gradients_match_autograd(generator: torch.Generator) -> None:
    model = BetaBernoulli(alpha=2.0, beta=3.0)
    y = make_y(generator)
    theta = 2 * torch.randn(5, 1, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(
        model.grad_log_likelihood(theta, None, y, row_weight=4.0),
        Model.grad_log_likelihood(model, theta, None, y, row_weight=4.0),
        rtol=1e-12,
        atol=1e-12,
    )
    torch.testing.assert_close(
        model.grad_log_prior(theta), Model.grad_log_prior(model, theta), rtol=1e-12, atol=1e-12
    )


def test_sequential_log_predictive_equals_batch_and_quadrature(generator: torch.Generator) -> None:
    model = BetaBernoulli(alpha=1.5, beta=2.5)
    y = make_y(generator)
    stats_, total = model.prior_stats(), torch.zeros((), dtype=torch.float64)
    for chunk in y.split(CHUNKS):
        total = total + model.log_predictive(stats_, None, chunk)
        stats_ = model.update_stats(stats_, None, chunk)
    batch = float(model.batch_log_evidence(None, y))
    assert float(total) == pytest.approx(batch, rel=1e-10)

    ones, rows = int(y.sum()), y.shape[0]
    assert float(stats_["alpha"]) == 1.5 + ones and float(stats_["beta"]) == 2.5 + rows - ones

    def integrand(p: float) -> float:
        return p**ones * (1 - p) ** (rows - ones) * stats.beta.pdf(p, 1.5, 2.5)

    value, _ = integrate.quad(integrand, 0.0, 1.0, epsabs=0, epsrel=1e-12)
    assert batch == pytest.approx(math.log(value), rel=1e-9)


def test_sample_prior_moments(generator: torch.Generator) -> None:
    alpha, beta, n = 2.0, 5.0, 40_000
    p = torch.sigmoid(BetaBernoulli(alpha, beta).sample_prior(n, generator)[:, 0])
    mean = alpha / (alpha + beta)
    var = alpha * beta / ((alpha + beta) ** 2 * (alpha + beta + 1))
    # 5 standard errors; p ∈ [0, 1] so Var(sample var) ≤ var/n is a safe bound for the second.
    assert abs(float(p.mean()) - mean) < 5 * math.sqrt(var / n)
    assert abs(float(p.var()) - var) < 5 * math.sqrt(var / n)


def test_sample_prior_is_finite_for_tiny_concentrations(generator: torch.Generator) -> None:
    draws = BetaBernoulli(alpha=0.01, beta=0.02).sample_prior(10_000, generator)
    assert torch.isfinite(draws).all()


def test_predict_returns_one_row_of_probabilities(generator: torch.Generator) -> None:
    model = BetaBernoulli()
    theta = torch.randn(6, 1, generator=generator, dtype=torch.float64)
    log_weights = torch.randn(6, generator=generator, dtype=torch.float64)
    probs = model.predict(theta, log_weights, None).probabilities
    assert probs is not None and probs.shape == (1, 2)
    p1 = special.softmax(log_weights.numpy()) @ special.expit(theta[:, 0].numpy())
    np.testing.assert_allclose(probs.numpy(), [[1 - p1, p1]], rtol=1e-12)


@pytest.mark.parametrize("y", [[0.0, 2.0], [-1.0, 1.0], [0.5, 1.0], [float("nan"), 0.0]])
def test_validate_rejects_non_binary(y: list[float]) -> None:
    with pytest.raises(ValueError):
        BetaBernoulli().validate_data(None, torch.tensor(y, dtype=torch.float64))


def test_validate_accepts_binary_and_needs_y() -> None:
    BetaBernoulli().validate_data(None, torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError):
        BetaBernoulli().validate_data(None, None)


@pytest.mark.parametrize(
    "config",
    [
        {"alpha": 0.0},
        {"alpha": -1.0},
        {"beta": float("nan")},
        {"beta": float("inf")},
        {"alpha": True},
        {"beta": "2"},
    ],
)
def test_bad_config_raises(config: dict) -> None:
    with pytest.raises(ModelConfigError):
        BetaBernoulli(**config)


def test_config_round_trip() -> None:
    model = BetaBernoulli(alpha=2, beta=0.5)
    assert model.param_dim == 1 and model.input_dim == 0
    assert BetaBernoulli(**model.config()).config() == {"alpha": 2.0, "beta": 0.5}
