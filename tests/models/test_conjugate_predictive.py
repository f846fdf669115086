"""``predict_from_stats`` agrees with the conjugate one-row predictive density ``log_predictive``
(an independent path: a difference of closed-form log evidences)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats as scipy_stats

from modelcompare.models import (
    BetaBernoulli,
    GammaPoisson,
    LinearRegression,
    LinearRegressionUnknownNoise,
)


def _trained(model, x, y):
    stats = model.update_stats(model.prior_stats(), x, y)
    return stats


def test_linear_regression_predictive_is_the_gaussian_of_log_predictive(generator) -> None:
    model = LinearRegression(3, noise_std=0.7, prior_std=1.5)
    x = torch.randn(40, 3, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.7 * torch.randn(
        40, generator=generator, dtype=torch.float64
    )
    stats = _trained(model, x, y)
    query = torch.randn(5, 3, generator=generator, dtype=torch.float64)
    prediction = model.predict_from_stats(stats, query)
    for i, y_star in enumerate([0.3, -1.0, 2.0, 0.0, 1.1]):
        exact = float(
            model.log_predictive(
                stats, query[i : i + 1], torch.tensor([y_star], dtype=torch.float64)
            )
        )
        normal = scipy_stats.norm.logpdf(
            y_star, float(prediction.mean[i]), math.sqrt(float(prediction.variance[i]))
        )
        assert exact == pytest.approx(normal, abs=1e-10)


def test_unknown_noise_predictive_is_the_student_t_of_log_predictive(generator) -> None:
    model = LinearRegressionUnknownNoise(2, prior_std=1.0, noise_shape=2.0, noise_scale=1.5)
    x = torch.randn(30, 2, generator=generator, dtype=torch.float64)
    y = x @ torch.tensor([0.5, -1.0], dtype=torch.float64) + torch.randn(
        30, generator=generator, dtype=torch.float64
    )
    stats = _trained(model, x, y)
    query = torch.randn(3, 2, generator=generator, dtype=torch.float64)
    prediction = model.predict_from_stats(stats, query)
    a = float(stats["a"])
    for i, y_star in enumerate([0.2, -2.5, 1.0]):
        exact = float(
            model.log_predictive(
                stats, query[i : i + 1], torch.tensor([y_star], dtype=torch.float64)
            )
        )
        # variance = scale² · ν/(ν − 2) with ν = 2a, so scale² = variance · (a − 1) / a.
        scale = math.sqrt(float(prediction.variance[i]) * (a - 1.0) / a)
        student = scipy_stats.t.logpdf(y_star, 2 * a, float(prediction.mean[i]), scale)
        assert exact == pytest.approx(student, abs=1e-10)


def test_beta_bernoulli_predictive_probability() -> None:
    model = BetaBernoulli(alpha=2.0, beta=3.0)
    stats = _trained(model, None, torch.tensor([1.0, 1.0, 0.0, 1.0]))
    p1 = float(model.predict_from_stats(stats, None).probabilities[0, 1])
    assert p1 == pytest.approx(math.exp(float(model.log_predictive(stats, None, torch.ones(1)))))
    assert p1 == pytest.approx(5.0 / 9.0)


def test_gamma_poisson_predictive_moments_sum_the_negative_binomial() -> None:
    model = GammaPoisson(shape=2.0, rate=0.5)
    stats = _trained(model, None, torch.tensor([3.0, 0.0, 5.0, 2.0]))
    prediction = model.predict_from_stats(stats, None)
    k = torch.arange(0, 400, dtype=torch.float64)
    mass = torch.stack([torch.exp(model.log_predictive(stats, None, value[None])) for value in k])
    assert float(mass.sum()) == pytest.approx(1.0, abs=1e-12)
    mean = float((k * mass).sum())
    assert float(prediction.mean[0]) == pytest.approx(mean, rel=1e-10)
    assert float(prediction.variance[0]) == pytest.approx(
        float(((k - mean) ** 2 * mass).sum()), rel=1e-10
    )
