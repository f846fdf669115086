"""GammaPoisson against scipy, autograd and a quadrature over λ."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from modelcompare.models.base import Model, ModelConfigError
from modelcompare.models.gamma_poisson import GammaPoisson

CHUNKS = [3, 1, 6, 2, 1, 5]  # uneven on purpose: 18 rows


def make_y(generator: torch.Generator, rows: int = 18, rate: float = 3.2) -> torch.Tensor:
    return torch.poisson(torch.full((rows,), rate, dtype=torch.float64), generator=generator)


def test_log_prior_matches_scipy_and_integrates_to_one(generator: torch.Generator) -> None:
    model = GammaPoisson(shape=2.5, rate=0.8)
    theta = torch.randn(8, 1, generator=generator, dtype=torch.float64)
    lam = np.exp(theta[:, 0].numpy())
    expected = stats.gamma.logpdf(lam, 2.5, scale=1 / 0.8) + np.log(lam)  # + log |dλ/dθ|
    np.testing.assert_allclose(model.log_prior(theta).numpy(), expected, rtol=1e-10)

    def density(t: float) -> float:
        return math.exp(model.log_prior(torch.tensor([[t]], dtype=torch.float64)).item())

    assert integrate.quad(density, -np.inf, np.inf)[0] == pytest.approx(1.0, rel=1e-9)


def test_log_likelihood_matches_scipy(generator: torch.Generator) -> None:
    model = GammaPoisson()
    y = make_y(generator)
    theta = torch.randn(5, 1, generator=generator, dtype=torch.float64)
    expected = stats.poisson.logpmf(y.numpy(), np.exp(theta.numpy()))
    np.testing.assert_allclose(model.log_likelihood(theta, None, y).numpy(), expected, rtol=1e-12)


def test_gradients_match_autograd(generator: torch.Generator) -> None:
    model = GammaPoisson(shape=3.0, rate=2.0)
    y = make_y(generator)
    theta = torch.randn(5, 1, generator=generator, dtype=torch.float64)
    torch.testing.assert_close(
        model.grad_log_likelihood(theta, None, y, row_weight=0.5),
        Model.grad_log_likelihood(model, theta, None, y, row_weight=0.5),
        rtol=1e-12,
        atol=1e-12,
    )
    torch.testing.assert_close(
        model.grad_log_prior(theta), Model.grad_log_prior(model, theta), rtol=1e-12, atol=1e-12
    )


def test_sequential_log_predictive_equals_batch_and_quadrature(generator: torch.Generator) -> None:
    model = GammaPoisson(shape=1.7, rate=0.6)
    y = make_y(generator)
    stats_, total = model.prior_stats(), torch.zeros((), dtype=torch.float64)
    for chunk in y.split(CHUNKS):
        total = total + model.log_predictive(stats_, None, chunk)
        stats_ = model.update_stats(stats_, None, chunk)
    batch = float(model.batch_log_evidence(None, y))
    assert float(total) == pytest.approx(batch, rel=1e-10)
    assert float(stats_["shape"]) == 1.7 + float(y.sum())
    assert float(stats_["rate"]) == pytest.approx(0.6 + 18)

    counts = y.numpy()

    def log_integrand(lam: float) -> float:
        return stats.poisson.logpmf(counts, lam).sum() + stats.gamma.logpdf(lam, 1.7, scale=1 / 0.6)

    shape_n, rate_n = 1.7 + counts.sum(), 0.6 + 18  # the posterior, to place the quadrature
    mode = (shape_n - 1) / rate_n
    shift = log_integrand(mode)
    upper = mode + 60 * math.sqrt(shape_n) / rate_n
    value, _ = integrate.quad(
        lambda lam: math.exp(log_integrand(lam) - shift), 0.0, upper, points=[mode], epsrel=1e-12
    )
    assert batch == pytest.approx(shift + math.log(value), rel=1e-9)


def test_single_row_predictive_is_negative_binomial() -> None:
    model = GammaPoisson(shape=2.3, rate=0.9)
    y = torch.arange(6, dtype=torch.float64)
    got = [float(model.log_predictive(model.prior_stats(), None, y[i : i + 1])) for i in range(6)]
    expected = stats.nbinom.logpmf(np.arange(6), 2.3, 0.9 / 1.9)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_sample_prior_moments(generator: torch.Generator) -> None:
    shape, rate, n = 3.0, 1.5, 40_000
    lam = torch.exp(GammaPoisson(shape, rate).sample_prior(n, generator)[:, 0])
    mean, var = shape / rate, shape / rate**2
    # 5 standard errors: √(var/n) for the mean; for the variance √((μ₄ − σ⁴)/n) with the Gamma's
    # excess kurtosis 6/shape, i.e. μ₄ − σ⁴ = σ⁴(2 + 6/shape).
    assert abs(float(lam.mean()) - mean) < 5 * math.sqrt(var / n)
    assert abs(float(lam.var()) - var) < 5 * var * math.sqrt((2 + 6 / shape) / n)
    log_lam = GammaPoisson(0.3, 2.0).sample_prior(n, generator)[:, 0]
    # log λ = log G − log b: mean ψ(a) − log b, variance ψ'(a) (exercises the small-shape path).
    expected = special.digamma(0.3) - math.log(2.0)
    assert abs(float(log_lam.mean()) - expected) < 5 * math.sqrt(special.polygamma(1, 0.3) / n)


def test_predict_returns_mean_and_variance(generator: torch.Generator) -> None:
    model = GammaPoisson()
    theta = torch.log(torch.tensor([[1.0], [4.0]], dtype=torch.float64))
    pred = model.predict(theta, torch.log(torch.tensor([3.0, 1.0], dtype=torch.float64)), None)
    assert pred.mean is not None and pred.variance is not None
    assert pred.mean.shape == (1,) and pred.variance.shape == (1,)
    # λ ∈ {1, 4} with weights 3/4, 1/4: E λ = 1.75, Var λ = 0.75·0.25·9, total = E λ + Var λ.
    assert float(pred.mean[0]) == pytest.approx(1.75)
    assert float(pred.variance[0]) == pytest.approx(1.75 + 0.75 * 0.25 * 9)


@pytest.mark.parametrize("y", [[1.0, -1.0], [0.5, 2.0], [float("nan")], [float("inf")]])
def test_validate_rejects_bad_counts(y: list[float]) -> None:
    with pytest.raises(ValueError):
        GammaPoisson().validate_data(None, torch.tensor(y, dtype=torch.float64))


def test_validate_accepts_counts() -> None:
    GammaPoisson().validate_data(None, torch.tensor([0.0, 3.0, 17.0], dtype=torch.float64))


@pytest.mark.parametrize(
    "config",
    [
        {"shape": 0.0},
        {"shape": -2.0},
        {"rate": float("nan")},
        {"rate": float("inf")},
        {"shape": True},
        {"rate": None},
    ],
)
def test_bad_config_raises(config: dict) -> None:
    with pytest.raises(ModelConfigError):
        GammaPoisson(**config)


def test_config_round_trip() -> None:
    model = GammaPoisson(shape=2, rate=0.25)
    assert model.param_dim == 1 and model.input_dim == 0
    assert GammaPoisson(**model.config()).config() == {"shape": 2.0, "rate": 0.25}
