"""Negative binomial regression: its probabilities are scipy's negative binomial, tending to the
Poisson as φ → 0; its predictive moments are the law of total variance over the particles; it
refuses targets that are not counts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from modelcompare.models.target import COUNT

from modelcompare_example_models import NegativeBinomialRegression

F64 = torch.float64
# θ = (w, b, log φ): overdispersion from near-Poisson to large, means from 0.05 to e⁶
THETA = torch.tensor([[0.5, 1.0, math.log(0.3)], [-1.0, -2.0, math.log(4.0)],
                      [2.0, 0.0, math.log(1e-3)]], dtype=F64)
X = torch.tensor([[0.2], [1.5], [-3.0], [3.0]], dtype=F64)
Y = torch.tensor([0.0, 7.0, 2.0, 250.0], dtype=F64)


def scipy_parameters(theta: torch.Tensor, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """scipy's nbinom(n, p) for mean μ and overdispersion φ: n = 1/φ, p = n/(n + μ);
    per particle and row."""
    theta_, x_ = theta.numpy(), x.numpy()
    mu = np.exp(theta_[:, :1] @ x_.T + theta_[:, 1:2])
    n = np.exp(-theta_[:, 2:])
    return n, n / (n + mu)


def test_the_likelihood_is_scipys_negative_binomial() -> None:
    found = NegativeBinomialRegression(dim=1).log_likelihood(THETA, X, Y)
    n, p = scipy_parameters(THETA, X)
    assert found.shape == (3, 4)
    np.testing.assert_allclose(found.numpy(), stats.nbinom.logpmf(Y.numpy(), n, p), rtol=1e-10)


def test_as_the_overdispersion_vanishes_the_likelihood_tends_to_the_poisson() -> None:
    phi = 1e-6
    theta = torch.tensor([[0.4, 0.5, math.log(phi)]], dtype=F64)
    found = NegativeBinomialRegression(dim=1).log_likelihood(theta, X, Y).numpy()
    y, mu = Y.numpy(), np.exp(0.4 * X.numpy()[:, 0] + 0.5)
    # log NB − log Poisson = φ((y − μ)² − y)/2 + O(φ²y³); Γ(y + 1/φ)/Γ(1/φ) loses ~1e-9
    np.testing.assert_allclose(found[0] - stats.poisson.logpmf(y, mu),
                               phi * ((y - mu) ** 2 - y) / 2, rtol=5e-3, atol=1e-8)


def test_predict_gives_the_mixtures_mean_and_variance() -> None:
    model = NegativeBinomialRegression(dim=1)
    log_weights = torch.log(torch.tensor([0.2, 0.3, 0.5], dtype=F64)) - 7.0  # unnormalised
    prediction = model.predict(THETA, log_weights, X)
    n, p = scipy_parameters(THETA, X)
    weights = np.array([0.2, 0.3, 0.5])
    means, variances = stats.nbinom.mean(n, p), stats.nbinom.var(n, p)
    mean = weights @ means
    assert prediction.mean is not None and prediction.variance is not None
    np.testing.assert_allclose(prediction.mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(prediction.variance.numpy(),
                               weights @ variances + weights @ (means - mean) ** 2, rtol=1e-10)


def test_without_inputs_the_log_mean_is_the_intercept() -> None:
    theta = torch.tensor([[1.0, math.log(0.5)]], dtype=F64)
    y = torch.tensor([0.0, 3.0, 9.0], dtype=F64)
    found = NegativeBinomialRegression(dim=0).log_likelihood(theta, None, y)
    expected = stats.nbinom.logpmf(y.numpy(), 2.0, 2.0 / (2.0 + math.e))
    np.testing.assert_allclose(found.numpy()[0], expected, rtol=1e-12)


@pytest.mark.parametrize("y", [-1.0, 2.5, math.nan])
def test_a_target_that_is_not_a_count_is_refused(y: float) -> None:
    model = NegativeBinomialRegression(dim=1)
    assert model.target() == COUNT
    with pytest.raises(ValueError, match=r"^negative_binomial_regression needs y to be "
                       r"non-negative integers$"):
        model.validate_data(X[:2], torch.tensor([3.0, y], dtype=F64))
    model.validate_data(X[:2], torch.tensor([3.0, 0.0], dtype=F64))
