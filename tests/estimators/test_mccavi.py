"""MC-CAVI: the ELBO is a lower bound on the exact log Z, close to the closed-form CAVI optimum;
for the Gaussian mixture against exact log Z by enumerating assignments, and against SG-AIS."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from estimators import EstimatorConfigError, OnlineEvidence
from estimators.history import Rows
from estimators.mccavi import (
    MCCAVIConfig,
    closed_form_regression_elbo,
    mccavi_regression,
    mccavi_regression_stats,
    normal_design,
    regression_stats,
)
from estimators.mccavi_mixture import KAPPA0, closed_form_mixture, mccavi_mixture
from estimators.variational import has_elbo, mccavi_elbo
from models import GaussianMixture, LinearRegression, LinearRegressionUnknownNoise
from models.linear_regression import design

F64 = torch.float64


def normal_data(rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 1.5 + 0.7 * torch.randn(rows, generator=g, dtype=F64)


@pytest.mark.parametrize("rows", [10, 300])
def test_normal_model_elbo_is_below_exact_log_z_and_near_the_cavi_optimum(rows: int) -> None:
    """y ~ N(μ, σ²), μ | σ² ~ N(0, σ²τ²), σ² ~ InvGamma(a₀, b₀): NIG regression on Φ = 1.
    Its exact log Z is that of the dim-1 NIG regression with x ≡ 0 (the slope is inert)."""
    y = normal_data(rows, rows)
    model = LinearRegressionUnknownNoise(dim=1, prior_std=2.0, noise_shape=2.0, noise_scale=1.0)
    exact = float(model.batch_log_evidence(torch.zeros(rows, 1, dtype=F64), y))
    stats = regression_stats(normal_design(rows), y, model.prior_std)
    optimum = closed_form_regression_elbo(model, stats)
    result = mccavi_regression_stats(model, stats, torch.Generator().manual_seed(0))
    assert result.converged
    assert result.elbo <= optimum + 1e-9 < exact
    assert optimum - result.elbo < 1e-3  # Monte Carlo noise costs almost nothing
    # The mean-field gap KL(q ‖ p) is small but positive (q drops the μ–σ² coupling).
    assert 0.0 < exact - result.elbo < 0.1


def test_regression_elbo_is_below_exact_log_z(stream) -> None:
    model, x, y = stream("linear_regression_unknown_noise", 200, 3)
    exact = float(model.batch_log_evidence(x, y))
    result = mccavi_regression(model, x, y, torch.Generator().manual_seed(1))
    optimum = closed_form_regression_elbo(model, regression_stats(design(x), y, model.prior_std))
    assert result.elbo <= optimum + 1e-9 < exact
    assert optimum - result.elbo < 1e-3
    assert exact - result.elbo < 0.5


def exact_mixture_log_z(x: torch.Tensor, components: int) -> float:
    """log Σ_z p(z) p(x | z) over all K^n assignments: Dirichlet–multinomial p(z) times
    Normal–Gamma marginal likelihoods per component and dimension (BDA3 §3.3)."""
    n = x.shape[0]
    z = torch.tensor(list(itertools.product(range(components), repeat=n)))
    onehot = torch.nn.functional.one_hot(z, components).to(F64)
    counts = onehot.sum(1)
    s1 = torch.einsum("snk,nd->skd", onehot, x)
    s2 = torch.einsum("snk,nd->skd", onehot, x**2)
    kappa = KAPPA0 + counts[..., None]
    a = 1.0 + counts[..., None] / 2
    b = 1.0 + 0.5 * (s2 - s1**2 / kappa)
    log_marginal = (torch.lgamma(a) - a * torch.log(b) + 0.5 * torch.log(KAPPA0 / kappa)
                    - 0.5 * counts[..., None] * math.log(2 * math.pi)).sum((1, 2))
    log_pz = (math.lgamma(components) - math.lgamma(n + components)
              + torch.lgamma(1.0 + counts).sum(1))
    return float(torch.logsumexp(log_marginal + log_pz, 0))


def two_clusters(rows: int, dim: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=g, dtype=F64)
    x[: rows // 2] = 0.5 * x[: rows // 2] - 2.0
    x[rows // 2 :] += 2.0
    return x[torch.randperm(rows, generator=g)]


def test_mixture_elbo_is_below_exact_log_z_by_enumeration() -> None:
    x = two_clusters(12, 1, 0)
    exact = exact_mixture_log_z(x, 2)
    result = mccavi_mixture(x, 2, torch.Generator().manual_seed(0))
    reference = closed_form_mixture(x, 2, torch.Generator().manual_seed(0))
    assert result.converged
    assert result.elbo < exact
    assert abs(result.elbo - reference) < 1e-2
    # Mean field keeps one of the K! = 2 label orders: the gap is about log 2 here.
    assert exact - result.elbo < math.log(2) + 0.5


def test_mixture_elbo_sandwiches_the_sgais_estimate() -> None:
    """ELBO ≤ SG-AIS log Ẑ + 3σ on the same rows (the sandwich users see)."""
    x = two_clusters(40, 1, 1)
    tracker = OnlineEvidence(GaussianMixture(dim=1, components=2), particles=64, seed=0)
    tracker.update(x)
    result = mccavi_elbo(GaussianMixture(dim=1, components=2), Rows(x, None),
                         torch.Generator().manual_seed(2))
    assert result.elbo <= tracker.log_evidence + 3.0 * tracker.log_evidence_stderr
    assert tracker.log_evidence - result.elbo < 3.0  # and the bound is not vacuous


def test_only_supported_families_have_an_elbo() -> None:
    assert has_elbo(GaussianMixture(1, 2)) and has_elbo(LinearRegressionUnknownNoise(1))
    assert not has_elbo(LinearRegression(1))
    with pytest.raises(TypeError, match="no MC-CAVI"):
        mccavi_elbo(LinearRegression(1), Rows(torch.zeros(2, 1, dtype=F64), torch.zeros(2)),
                    torch.Generator().manual_seed(0))


def test_bad_config_raises() -> None:
    with pytest.raises(EstimatorConfigError):
        MCCAVIConfig(initial_draws=64, max_draws=32)
    with pytest.raises(EstimatorConfigError):
        MCCAVIConfig(step_size=0.0)
