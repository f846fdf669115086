"""Student-t regression: its density is scipy's Student-t, tending to the normal as ν grows;
its predictive moments are the particles' spread plus the noise's variance σ²ν/(ν − 2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from modelcompare_example_models import StudentTRegression

F64 = torch.float64
# θ = (w₁, w₂, b, log σ): three particles, the last with σ far from 1
THETA = torch.tensor([[0.5, -1.0, 0.2, 0.0], [2.0, 0.3, -1.5, math.log(0.4)],
                      [-0.7, 0.0, 3.0, math.log(5.0)]], dtype=F64)
X = torch.tensor([[0.1, -0.3], [1.2, 2.0], [-2.5, 0.7], [0.0, 0.0]], dtype=F64)
Y = torch.tensor([0.4, -3.0, 12.0, 0.0], dtype=F64)


@pytest.mark.parametrize("dof", [2.5, 4.0, 30.0])
def test_the_likelihood_is_scipys_student_t(dof: float) -> None:
    found = StudentTRegression(dim=2, dof=dof).log_likelihood(THETA, X, Y)
    theta = THETA.numpy()
    location = theta[:, :2] @ X.numpy().T + theta[:, 2:3]
    expected = stats.t.logpdf(Y.numpy(), df=dof, loc=location, scale=np.exp(theta[:, 3:]))
    assert found.shape == (3, 4)
    np.testing.assert_allclose(found.numpy(), expected, rtol=1e-12)


def test_at_a_large_dof_the_likelihood_tends_to_the_normal() -> None:
    """log t_ν(z) − log φ(z) = (z⁴ − 2z² − 1)/(4ν) + O(ν⁻²) for the standardised residual z."""
    dof = 1000.0
    found = StudentTRegression(dim=2, dof=dof).log_likelihood(THETA, X, Y).numpy()
    theta = THETA.numpy()
    location = theta[:, :2] @ X.numpy().T + theta[:, 2:3]
    sigma = np.exp(theta[:, 3:])
    normal = stats.norm.logpdf(Y.numpy(), loc=location, scale=sigma)
    z = (Y.numpy() - location) / sigma
    assert np.abs(z).max() > 2  # rows where the two differ visibly at ν = 4
    np.testing.assert_allclose(found - normal, (z**4 - 2 * z**2 - 1) / (4 * dof),
                               atol=3 * np.abs(z).max() ** 6 / dof**2)
    at_four = StudentTRegression(dim=2, dof=4.0).log_likelihood(THETA, X, Y).numpy()
    assert np.abs(at_four - normal).max() > 0.5


def test_without_inputs_the_mean_is_the_intercept() -> None:
    theta = torch.tensor([[1.5, math.log(2.0)]], dtype=F64)
    y = torch.tensor([1.5, 4.0], dtype=F64)
    found = StudentTRegression(dim=0).log_likelihood(theta, None, y)
    expected = stats.t.logpdf(y.numpy(), df=4.0, loc=1.5, scale=2.0)
    np.testing.assert_allclose(found.numpy()[0], expected, rtol=1e-12)


def test_predict_adds_the_noise_variance_to_the_spread() -> None:
    model = StudentTRegression(dim=2, dof=5.0)
    log_weights = torch.log(torch.tensor([0.5, 0.25, 0.25], dtype=F64)) + 3.0  # unnormalised
    prediction = model.predict(THETA, log_weights, X)
    weights = np.array([0.5, 0.25, 0.25])
    theta = THETA.numpy()
    means = theta[:, :2] @ X.numpy().T + theta[:, 2:3]  # (particles, rows)
    mean = weights @ means
    noise = weights @ stats.t.var(df=5.0, scale=np.exp(theta[:, 3]))
    assert prediction.mean is not None and prediction.variance is not None
    np.testing.assert_allclose(prediction.mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(prediction.variance.numpy(),
                               weights @ (means - mean) ** 2 + noise, rtol=1e-12)
