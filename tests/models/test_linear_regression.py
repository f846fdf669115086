"""LinearRegression (known noise) against scipy and its own conjugate algebra."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from modelcompare.models.base import Model, ModelConfigError
from modelcompare.models.linear_regression import LinearRegression

CHUNKS = [1, 4, 2, 9, 3, 1, 5]  # uneven on purpose: 25 rows


def make_data(generator: torch.Generator, rows: int = 25, dim: int = 3):
    x = torch.randn(rows, dim, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([0.5, -1.0, 2.0][:dim], dtype=torch.float64) + 0.3
    y = y + 0.7 * torch.randn(rows, generator=generator, dtype=torch.float64)
    return x, y


def test_log_prior_matches_scipy(generator: torch.Generator) -> None:
    model = LinearRegression(3, noise_std=0.7, prior_std=1.8)
    theta = torch.randn(6, 4, generator=generator, dtype=torch.float64) * 2
    expected = stats.norm.logpdf(theta.numpy(), scale=1.8).sum(1)
    np.testing.assert_allclose(model.log_prior(theta).numpy(), expected, rtol=1e-12)


def test_log_likelihood_matches_scipy(generator: torch.Generator) -> None:
    model = LinearRegression(3, noise_std=0.7)
    x, y = make_data(generator)
    theta = torch.randn(5, 4, generator=generator, dtype=torch.float64)
    mean = theta[:, :3].numpy() @ x.numpy().T + theta[:, 3:].numpy()
    expected = stats.norm.logpdf(y.numpy(), loc=mean, scale=0.7)
    np.testing.assert_allclose(model.log_likelihood(theta, x, y).numpy(), expected, rtol=1e-12)


def test_gradients_match_autograd(generator: torch.Generator) -> None:
    model = LinearRegression(3, noise_std=0.7, prior_std=1.3)
    x, y = make_data(generator)
    theta = torch.randn(5, 4, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(
        model.grad_log_likelihood(theta, x, y, row_weight=2.5),
        Model.grad_log_likelihood(model, theta, x, y, row_weight=2.5),
        rtol=1e-10,
        atol=1e-12,
    )
    torch.testing.assert_close(
        model.grad_log_prior(theta), Model.grad_log_prior(model, theta), rtol=1e-12, atol=0
    )


def test_sequential_log_predictive_equals_batch_evidence(generator: torch.Generator) -> None:
    model = LinearRegression(3, noise_std=0.7, prior_std=1.3)
    x, y = make_data(generator)
    stats_, total = model.prior_stats(), torch.zeros((), dtype=torch.float64)
    for xc, yc in zip(x.split(CHUNKS), y.split(CHUNKS), strict=True):
        total = total + model.log_predictive(stats_, xc, yc)
        stats_ = model.update_stats(stats_, xc, yc)
    batch = model.batch_log_evidence(x, y)
    assert float(total) == pytest.approx(float(batch), rel=1e-10)


def test_batch_evidence_matches_scipy_multivariate_normal(generator: torch.Generator) -> None:
    model = LinearRegression(3, noise_std=0.7, prior_std=1.3)
    x, y = make_data(generator)
    phi = np.hstack([x.numpy(), np.ones((25, 1))])
    cov = 0.49 * np.eye(25) + 1.69 * phi @ phi.T
    expected = stats.multivariate_normal(mean=np.zeros(25), cov=cov).logpdf(y.numpy())
    assert float(model.batch_log_evidence(x, y)) == pytest.approx(expected, rel=1e-10)


def test_intercept_only_model_has_the_exact_evidence(generator: torch.Generator) -> None:
    """dim 0: y = b + ε, so y ~ N(0, σ²I + τ²11ᵀ); x is None (or has no columns)."""
    model = LinearRegression(0, noise_std=0.7, prior_std=1.3)
    assert (model.input_dim, model.param_dim) == (0, 1)
    y = 0.4 + 0.7 * torch.randn(25, generator=generator, dtype=torch.float64)
    cov = 0.49 * np.eye(25) + 1.69 * np.ones((25, 25))
    expected = stats.multivariate_normal(mean=np.zeros(25), cov=cov).logpdf(y.numpy())
    assert float(model.batch_log_evidence(None, y)) == pytest.approx(expected, rel=1e-10)
    stats_, total = model.prior_stats(), torch.zeros((), dtype=torch.float64)
    for yc in y.split(CHUNKS):
        total = total + model.log_predictive(stats_, None, yc)
        stats_ = model.update_stats(stats_, torch.zeros(len(yc), 0, dtype=torch.float64), yc)
    assert float(total) == pytest.approx(expected, rel=1e-10)
    theta = torch.randn(4, 1, generator=generator, dtype=torch.float64)
    np.testing.assert_allclose(model.log_likelihood(theta, None, y).numpy(),
                               stats.norm.logpdf(y.numpy(), loc=theta.numpy(), scale=0.7))
    prediction = model.predict_from_stats(stats_, torch.zeros(2, 5, dtype=torch.float64))
    assert prediction.mean is not None and prediction.mean.shape == (2,)  # x only counts rows


def test_sample_prior_moments(generator: torch.Generator) -> None:
    model = LinearRegression(2, prior_std=1.5)
    n = 40_000
    draws = model.sample_prior(n, generator)
    assert draws.shape == (n, 3) and draws.dtype == torch.float64
    # 5 Monte Carlo standard errors: sd/√n for the mean, τ²·√(2/n) for the variance (normal).
    se_mean, se_var = 1.5 / math.sqrt(n), 1.5**2 * math.sqrt(2 / n)
    assert draws.mean(0).abs().max() < 5 * se_mean
    assert (draws.var(0) - 1.5**2).abs().max() < 5 * se_var


def test_predict_adds_noise_to_particle_spread(generator: torch.Generator) -> None:
    model = LinearRegression(1, noise_std=0.5)
    theta = torch.tensor([[1.0, 0.0], [3.0, 1.0]], dtype=torch.float64)
    x = torch.tensor([[2.0]], dtype=torch.float64)
    # Weights 1/4 and 3/4 (log-weights need not be normalised); means 2 and 7.
    pred = model.predict(theta, torch.log(torch.tensor([1.0, 3.0], dtype=torch.float64)), x)
    assert pred.mean is not None and pred.variance is not None
    assert float(pred.mean[0]) == pytest.approx(0.25 * 2 + 0.75 * 7)
    assert float(pred.variance[0]) == pytest.approx(0.25 * 0.75 * 25 + 0.25)


@pytest.mark.parametrize(
    "config",
    [
        {"dim": -2},
        {"dim": True},
        {"dim": 2.5},
        {"dim": 2, "noise_std": 0.0},
        {"dim": 2, "noise_std": -1.0},
        {"dim": 2, "noise_std": float("nan")},
        {"dim": 2, "prior_std": float("inf")},
        {"dim": 2, "prior_std": True},
        {"dim": 2, "prior_std": "1"},
    ],
)
def test_bad_config_raises(config: dict) -> None:
    with pytest.raises(ModelConfigError):
        LinearRegression(**config)


def test_config_round_trip() -> None:
    model = LinearRegression(4, noise_std=0.2, prior_std=3)
    assert LinearRegression(**model.config()).config() == model.config()
    assert model.param_dim == 5


def test_validate_data() -> None:
    model = LinearRegression(2)
    y = torch.zeros(3, dtype=torch.float64)
    model.validate_data(torch.zeros(3, 2, dtype=torch.float64), y)
    with pytest.raises(ValueError):
        model.validate_data(torch.zeros(3, 3, dtype=torch.float64), y)
    with pytest.raises(ValueError):
        model.validate_data(None, y)
    with pytest.raises(ValueError):
        model.validate_data(torch.zeros(3, 2, dtype=torch.float64), None)
