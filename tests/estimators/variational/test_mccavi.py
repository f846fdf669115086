"""MC-CAVI: the ELBO is a lower bound on the exact log Z, close to the closed-form CAVI optimum;
for the Gaussian mixture against exact log Z by enumerating assignments, and against SG-AIS."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators import EstimatorConfigError, OnlineEvidence
from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.variational.mccavi import MCCAVISettings, has_elbo, mccavi_elbo
from modelcompare.models import GaussianMixture, LinearRegression, LinearRegressionUnknownNoise
from tests.estimators.mixture_oracle import exact_mixture_log_z, two_clusters

F64 = torch.float64


def normal_data(rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 1.5 + 0.7 * torch.randn(rows, generator=g, dtype=F64)


@pytest.mark.parametrize("rows", [10, 300])
def test_normal_model_elbo_is_below_exact_log_z_and_near_the_cavi_optimum(rows: int) -> None:
    """y ~ N(μ, σ²), μ | σ² ~ N(0, σ²τ²), σ² ~ InvGamma(a₀, b₀): the dim-0 NIG regression
    (Φ = 1). Its exact log Z is also that of the dim-1 NIG regression with x ≡ 0 (the slope is
    inert): an independent check of the intercept-only closed form."""
    y = normal_data(rows, rows)
    settings = {"prior_std": 2.0, "noise_shape": 2.0, "noise_scale": 1.0}
    model = LinearRegressionUnknownNoise(dim=0, **settings)
    exact = float(model.batch_log_evidence(None, y))
    inert_slope = LinearRegressionUnknownNoise(dim=1, **settings)
    zeros = torch.zeros(rows, 1, dtype=F64)
    assert exact == pytest.approx(float(inert_slope.batch_log_evidence(zeros, y)), abs=1e-9)
    optimum = model.mean_field().cavi_elbo(None, y, torch.Generator())
    result = mccavi_elbo(model, Rows(None, y), torch.Generator().manual_seed(0))
    assert result.converged
    assert result.elbo <= optimum + 1e-9 < exact
    assert optimum - result.elbo < 1e-3  # Monte Carlo noise costs almost nothing
    # The mean-field gap KL(q ‖ p) is small but positive (q drops the μ–σ² coupling).
    assert 0.0 < exact - result.elbo < 0.1


def test_regression_elbo_is_below_exact_log_z(stream) -> None:
    model, x, y = stream("linear_regression_unknown_noise", 200, 3)
    exact = float(model.batch_log_evidence(x, y))
    result = mccavi_elbo(model, Rows(x, y), torch.Generator().manual_seed(1))
    optimum = model.mean_field().cavi_elbo(x, y, torch.Generator())
    assert result.elbo <= optimum + 1e-9 < exact
    assert optimum - result.elbo < 1e-3
    assert exact - result.elbo < 0.5


def test_mixture_elbo_is_below_exact_log_z_by_enumeration() -> None:
    x = two_clusters(12, 1, 0)
    exact = exact_mixture_log_z(x, 2)
    model = GaussianMixture(dim=1, components=2)
    result = mccavi_elbo(model, Rows(x, None), torch.Generator().manual_seed(0))
    reference = model.mean_field().cavi_elbo(x, None, torch.Generator().manual_seed(0))
    assert result.converged
    assert result.elbo < exact
    assert abs(result.elbo - reference) < 1e-2
    # Mean field keeps one of the K! = 2 label orders: the gap is about log 2 here.
    assert exact - result.elbo < math.log(2) + 0.5


@pytest.mark.slow
def test_mixture_elbo_sandwiches_the_sgais_estimate() -> None:
    """ELBO ≤ SG-AIS log Ẑ + 3σ on the same rows (the sandwich users see)."""
    x = two_clusters(40, 1, 1)
    tracker = OnlineEvidence(GaussianMixture(dim=1, components=2), particles=64, seed=0)
    tracker.update(x)
    result = mccavi_elbo(
        GaussianMixture(dim=1, components=2), Rows(x, None), torch.Generator().manual_seed(2)
    )
    assert result.elbo <= tracker.log_evidence + 3.0 * tracker.log_evidence_stderr
    assert tracker.log_evidence - result.elbo < 3.0  # and the bound is not vacuous


def test_only_supported_families_have_an_elbo() -> None:
    assert has_elbo(GaussianMixture(1, 2)) and has_elbo(LinearRegressionUnknownNoise(1))
    assert not has_elbo(LinearRegression(1))
    with pytest.raises(TypeError, match="no MC-CAVI"):
        mccavi_elbo(
            LinearRegression(1),
            Rows(torch.zeros(2, 1, dtype=F64), torch.zeros(2)),
            torch.Generator().manual_seed(0),
        )


def test_bad_config_raises() -> None:
    with pytest.raises(EstimatorConfigError, match="max_draws"):
        MCCAVISettings.parse({"initial_draws": 64, "max_draws": 32})
    with pytest.raises(EstimatorConfigError):
        MCCAVISettings.parse({"step_size": 0.0})
