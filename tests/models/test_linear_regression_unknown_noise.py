"""LinearRegressionUnknownNoise (Normal–Inverse-Gamma) against scipy, autograd and quadrature."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from modelcompare.models.base import Model, ModelConfigError
from modelcompare.models.linear_regression_unknown_noise import LinearRegressionUnknownNoise

CHUNKS = [2, 1, 6, 3, 1, 8, 4]  # uneven on purpose: 25 rows
CONFIG = {"dim": 2, "prior_std": 1.4, "noise_shape": 2.5, "noise_scale": 1.5}


def make_data(generator: torch.Generator, rows: int = 25, dim: int = 2):
    x = torch.randn(rows, dim, generator=generator, dtype=torch.float64)
    y = x @ torch.linspace(-1.0, 1.5, dim, dtype=torch.float64) - 0.4
    return x, y + 0.8 * torch.randn(rows, generator=generator, dtype=torch.float64)


def test_log_prior_matches_scipy(generator: torch.Generator) -> None:
    model = LinearRegressionUnknownNoise(**CONFIG)
    theta = torch.randn(6, 4, generator=generator, dtype=torch.float64) * 1.5
    beta, s = theta[:, :3].numpy(), theta[:, 3].numpy()
    var = np.exp(s)
    expected = (
        stats.invgamma.logpdf(var, a=2.5, scale=1.5)
        + s  # log |dσ²/ds|
        + stats.norm.logpdf(beta, scale=1.4 * np.sqrt(var)[:, None]).sum(1)
    )
    np.testing.assert_allclose(model.log_prior(theta).numpy(), expected, rtol=1e-12)


def test_log_likelihood_matches_scipy(generator: torch.Generator) -> None:
    model = LinearRegressionUnknownNoise(**CONFIG)
    x, y = make_data(generator)
    theta = torch.randn(5, 4, generator=generator, dtype=torch.float64)
    mean = theta[:, :2].numpy() @ x.numpy().T + theta[:, 2:3].numpy()
    scale = np.exp(0.5 * theta[:, 3:].numpy())
    expected = stats.norm.logpdf(y.numpy(), loc=mean, scale=scale)
    np.testing.assert_allclose(model.log_likelihood(theta, x, y).numpy(), expected, rtol=1e-12)


def test_gradients_match_autograd(generator: torch.Generator) -> None:
    model = LinearRegressionUnknownNoise(**CONFIG)
    x, y = make_data(generator)
    theta = torch.randn(5, 4, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(
        model.grad_log_likelihood(theta, x, y, row_weight=3.0),
        Model.grad_log_likelihood(model, theta, x, y, row_weight=3.0),
        rtol=1e-10,
        atol=1e-12,
    )
    torch.testing.assert_close(
        model.grad_log_prior(theta), Model.grad_log_prior(model, theta), rtol=1e-10, atol=1e-12
    )


def test_sequential_log_predictive_equals_batch_evidence(generator: torch.Generator) -> None:
    model = LinearRegressionUnknownNoise(**CONFIG)
    x, y = make_data(generator)
    stats_, total = model.prior_stats(), torch.zeros((), dtype=torch.float64)
    for xc, yc in zip(x.split(CHUNKS), y.split(CHUNKS), strict=True):
        total = total + model.log_predictive(stats_, xc, yc)
        stats_ = model.update_stats(stats_, xc, yc)
    assert float(total) == pytest.approx(float(model.batch_log_evidence(x, y)), rel=1e-10)
    assert float(stats_["a"]) == 2.5 + 25 / 2


def test_batch_evidence_matches_scipy_multivariate_t(generator: torch.Generator) -> None:
    model = LinearRegressionUnknownNoise(**CONFIG)
    x, y = make_data(generator)
    phi = np.hstack([x.numpy(), np.ones((25, 1))])
    shape = (1.5 / 2.5) * (np.eye(25) + 1.4**2 * phi @ phi.T)
    expected = stats.multivariate_t(loc=np.zeros(25), shape=shape, df=5.0).logpdf(y.numpy())
    assert float(model.batch_log_evidence(x, y)) == pytest.approx(expected, rel=1e-10)


def test_normal_model_is_dim_zero(generator: torch.Generator) -> None:
    """dim 0: y ~ N(μ, σ²) with a NIG prior, so y ~ St_2a₀(0, (b₀/a₀)(I + τ²11ᵀ))."""
    model = LinearRegressionUnknownNoise(**{**CONFIG, "dim": 0})
    assert (model.input_dim, model.param_dim) == (0, 2)
    y = 0.3 + torch.randn(25, generator=generator, dtype=torch.float64)
    shape = (1.5 / 2.5) * (np.eye(25) + 1.4**2 * np.ones((25, 25)))
    expected = stats.multivariate_t(loc=np.zeros(25), shape=shape, df=5.0).logpdf(y.numpy())
    assert float(model.batch_log_evidence(None, y)) == pytest.approx(expected, rel=1e-10)
    stats_, total = model.prior_stats(), torch.zeros((), dtype=torch.float64)
    for yc in y.split([5, 11, 9]):
        total = total + model.log_predictive(stats_, None, yc)
        stats_ = model.update_stats(stats_, None, yc)
    assert float(total) == pytest.approx(expected, rel=1e-10)


def test_batch_evidence_matches_quadrature_over_noise_variance(generator: torch.Generator) -> None:
    # p(y) = ∫ N(y; 0, σ²C) InvGamma(σ²; a₀, b₀) dσ², C = I + τ²ΦΦᵀ; integrated over s = log σ².
    model = LinearRegressionUnknownNoise(dim=1, prior_std=0.8, noise_shape=1.3, noise_scale=0.6)
    x, y = make_data(generator, rows=8, dim=1)
    phi = np.hstack([x.numpy(), np.ones((8, 1))])
    cov = np.eye(8) + 0.64 * phi @ phi.T
    log_det = np.linalg.slogdet(cov)[1]
    quad_form = y.numpy() @ np.linalg.solve(cov, y.numpy())

    def log_integrand(s: float) -> float:
        var = math.exp(s)
        log_normal = -0.5 * (8 * math.log(2 * math.pi * var) + log_det + quad_form / var)
        return log_normal + stats.invgamma.logpdf(var, a=1.3, scale=0.6) + s

    # The integrand decays like e^{−(a₀ + n/2)s} above its peak and doubly exponentially below.
    grid = np.linspace(-15, 15, 3001)
    peak = grid[np.argmax([log_integrand(s) for s in grid])]
    shift = log_integrand(peak)
    value, _ = integrate.quad(
        lambda s: math.exp(log_integrand(s) - shift),
        peak - 30,
        peak + 30,
        points=[peak],
        epsabs=0,
        epsrel=1e-12,
    )
    expected = shift + math.log(value)
    assert float(model.batch_log_evidence(x, y)) == pytest.approx(expected, rel=1e-9)


def test_sample_prior_moments(generator: torch.Generator) -> None:
    model = LinearRegressionUnknownNoise(dim=2, prior_std=1.4, noise_shape=0.7, noise_scale=2.0)
    n = 40_000
    draws = model.sample_prior(n, generator)
    assert draws.shape == (n, 4)
    # log σ² = log b₀ − log G, G ~ Gamma(a₀): mean log b₀ − ψ(a₀), variance ψ'(a₀).
    # β/(στ) ~ N(0, 1) independently of σ². Tolerances: 5 standard errors (sd/√n, var·√(2/n)).
    s = draws[:, 3]
    mean_s, var_s = math.log(2.0) - special.digamma(0.7), special.polygamma(1, 0.7)
    assert abs(float(s.mean()) - mean_s) < 5 * math.sqrt(var_s / n)
    standardised = draws[:, :3] / (1.4 * torch.exp(0.5 * s))[:, None]
    assert standardised.mean(0).abs().max() < 5 / math.sqrt(n)
    assert (standardised.var(0) - 1).abs().max() < 5 * math.sqrt(2 / n)


def test_predict_mixes_particle_spread_and_noise() -> None:
    model = LinearRegressionUnknownNoise(dim=1)
    theta = torch.tensor([[1.0, 0.0, math.log(0.5)], [3.0, 1.0, math.log(2.0)]])
    theta = theta.to(torch.float64)
    x = torch.tensor([[2.0], [0.0]], dtype=torch.float64)
    pred = model.predict(theta, torch.log(torch.tensor([1.0, 3.0], dtype=torch.float64)), x)
    assert pred.mean is not None and pred.variance is not None
    # Weights 1/4, 3/4; means (2, 0) and (7, 1); noise variances 0.5 and 2.
    np.testing.assert_allclose(pred.mean.numpy(), [0.25 * 2 + 0.75 * 7, 0.75])
    noise = 0.25 * 0.5 + 0.75 * 2.0
    np.testing.assert_allclose(
        pred.variance.numpy(), [0.25 * 0.75 * 25 + noise, 0.25 * 0.75 * 1 + noise]
    )


@pytest.mark.parametrize(
    "config",
    [
        {"dim": -1},
        {"dim": True},
        {"dim": 2, "prior_std": 0.0},
        {"dim": 2, "noise_shape": -1.0},
        {"dim": 2, "noise_shape": float("nan")},
        {"dim": 2, "noise_scale": float("inf")},
        {"dim": 2, "noise_scale": False},
    ],
)
def test_bad_config_raises(config: dict) -> None:
    with pytest.raises(ModelConfigError):
        LinearRegressionUnknownNoise(**config)


def test_config_round_trip() -> None:
    model = LinearRegressionUnknownNoise(**CONFIG)
    assert model.param_dim == 4
    assert LinearRegressionUnknownNoise(**model.config()).config() == CONFIG
