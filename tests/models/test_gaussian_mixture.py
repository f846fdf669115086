"""GaussianMixture: the unconstrained prior against scipy densities times an autograd Jacobian."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from modelcompare.models.base import ModelConfigError
from modelcompare.models.gaussian_mixture import GaussianMixture


def to_constrained_vector(model: GaussianMixture, theta: torch.Tensor) -> torch.Tensor:
    """θ (D,) -> (π_1..π_{K-1}, μ, σ²) (D,): the square map whose Jacobian the prior carries."""
    parts = model.constrained(theta[None])
    return torch.cat(
        [
            parts["weights"][0, :-1],
            parts["means"][0].reshape(-1),
            parts["variances"][0].reshape(-1),
        ]
    )


def test_log_prior_is_constrained_density_times_jacobian(generator: torch.Generator) -> None:
    model = GaussianMixture(2, components=3)
    theta = model.sample_prior(4, generator)
    theta = torch.cat([theta, torch.randn(2, model.param_dim, generator=generator).double()])
    log_prior = model.log_prior(theta)
    for m in range(theta.shape[0]):
        parts = {k: v[0].numpy() for k, v in model.constrained(theta[m : m + 1]).items()}
        density = (
            stats.dirichlet.logpdf(parts["weights"], np.ones(3))
            + stats.invgamma.logpdf(parts["variances"], a=1.0, scale=1.0).sum()
            + stats.norm.logpdf(parts["means"], scale=2.0 * np.sqrt(parts["variances"])).sum()
        )
        jac = torch.autograd.functional.jacobian(
            lambda t: to_constrained_vector(model, t), theta[m]
        )
        log_jac = torch.linalg.slogdet(jac)[1].item()
        assert log_prior[m].item() == pytest.approx(density + log_jac, rel=1e-10, abs=1e-10)


def test_weight_prior_integrates_to_one() -> None:
    # K = 2, dim = 1: the z-marginal of the prior is e^{log Γ(2) + log π₁ + log π₂}; ∫ dz = 1.
    model = GaussianMixture(1, components=2)

    def weight_density(z: float) -> float:
        theta = torch.tensor([[z, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
        # Both μ = 0 and s = log σ² = 0 (dσ²/ds = 1): divide out their prior terms.
        rest = 2 * (stats.norm.logpdf(0.0, scale=2.0) + stats.invgamma.logpdf(1.0, a=1.0))
        return math.exp(model.log_prior(theta).item() - rest)

    value, _ = integrate.quad(weight_density, -np.inf, np.inf, epsabs=1e-13)
    assert value == pytest.approx(1.0, rel=1e-9)


def test_log_likelihood_matches_scipy_mixture(generator: torch.Generator) -> None:
    model = GaussianMixture(2, components=3)
    theta = model.sample_prior(4, generator)
    x = 2.0 * torch.randn(7, 2, generator=generator, dtype=torch.float64)
    got = model.log_likelihood(theta, x, None).numpy()
    assert got.shape == (4, 7)
    for m in range(4):
        parts = {k: v[0].numpy() for k, v in model.constrained(theta[m : m + 1]).items()}
        comps = np.stack(
            [
                np.log(parts["weights"][k])
                + stats.multivariate_normal(
                    parts["means"][k], np.diag(parts["variances"][k])
                ).logpdf(x.numpy())
                for k in range(3)
            ]
        )
        np.testing.assert_allclose(got[m], special.logsumexp(comps, axis=0), rtol=1e-9)


def test_single_component_is_a_diagonal_gaussian(generator: torch.Generator) -> None:
    model = GaussianMixture(3, components=1)
    assert model.param_dim == 6
    theta = model.sample_prior(2, generator)
    x = torch.randn(5, 3, generator=generator, dtype=torch.float64)
    means, log_var = theta[:, None, :3].numpy(), theta[:, None, 3:].numpy()
    expected = stats.norm.logpdf(x.numpy()[None], means, np.exp(0.5 * log_var)).sum(-1)
    np.testing.assert_allclose(model.log_likelihood(theta, x, None).numpy(), expected, rtol=1e-10)


def test_sample_prior_moments(generator: torch.Generator) -> None:
    k, n = 3, 40_000
    model = GaussianMixture(2, components=k)
    parts = model.constrained(model.sample_prior(n, generator))
    log_var = torch.log(parts["variances"]).reshape(n, -1)
    standardised = (parts["means"] / (2.0 * torch.sqrt(parts["variances"]))).reshape(n, -1)
    weights = parts["weights"]
    # Every check allows 5 Monte Carlo standard errors (sd/√n; √(2/n)·var for a normal variance).
    # Dirichlet(1): E π_k = 1/K, Var π_k = (K − 1)/(K²(K + 1)).
    var_pi = (k - 1) / (k**2 * (k + 1))
    assert (weights.mean(0) - 1 / k).abs().max() < 5 * math.sqrt(var_pi / n)
    # π_k ~ Beta(1, 2) has kurtosis 2.4, so SE(sample variance) = Var π_k · √(1.4/n).
    assert (weights.var(0) - var_pi).abs().max() < 5 * var_pi * math.sqrt(1.4 / n)
    # σ² ~ InvGamma(1, 1) ⇔ log σ² = −log E, E ~ Exp(1): mean γ (Euler), variance π²/6.
    assert (log_var.mean(0) - np.euler_gamma).abs().max() < 5 * math.sqrt(math.pi**2 / 6 / n)
    # μ / (2σ) ~ N(0, 1) independently of σ².
    assert standardised.mean(0).abs().max() < 5 / math.sqrt(n)
    assert (standardised.var(0) - 1).abs().max() < 5 * math.sqrt(2 / n)


def test_predict_is_weighted_mixture_density_and_normalised(generator: torch.Generator) -> None:
    model = GaussianMixture(1, components=2)
    theta = model.sample_prior(5, generator)
    log_weights = torch.randn(5, generator=generator, dtype=torch.float64)
    x = torch.linspace(-3, 3, 4, dtype=torch.float64)[:, None]
    pred = model.predict(theta, log_weights, x).log_density
    assert pred is not None and pred.shape == (4,)
    weights = special.softmax(log_weights.numpy())
    dens = np.exp(model.log_likelihood(theta, x, None).numpy())
    np.testing.assert_allclose(pred.numpy(), np.log(weights @ dens), rtol=1e-12)

    # Normalisation on a grid, for particles with σ ∈ [0.5, 2] so ±40 covers all the mass.
    theta = torch.tensor(
        [[0.3, -1.0, 2.0, math.log(0.25), math.log(4.0)], [-1.0, 0.5, 0.0, 0.0, math.log(2.0)]],
        dtype=torch.float64,
    )
    grid = torch.linspace(-40, 40, 40_001, dtype=torch.float64)
    dens = torch.exp(model.predict(theta, log_weights[:2], grid[:, None]).log_density)
    total = integrate.simpson(dens.numpy(), x=grid.numpy())
    assert total == pytest.approx(1.0, rel=1e-9)


def test_gradient_is_finite_and_shaped(generator: torch.Generator) -> None:
    model = GaussianMixture(2, components=3)
    theta = model.sample_prior(6, generator)
    x = torch.randn(10, 2, generator=generator, dtype=torch.float64)
    grad = model.grad_log_likelihood(theta, x, None)
    assert grad.shape == theta.shape and torch.isfinite(grad).all()
    assert torch.isfinite(model.grad_log_prior(theta)).all()


def test_validate_data() -> None:
    model = GaussianMixture(2, components=2)
    model.validate_data(torch.zeros(4, 2, dtype=torch.float64), None)
    with pytest.raises(ValueError):
        model.validate_data(torch.zeros(4, 3, dtype=torch.float64), None)
    with pytest.raises(ValueError):
        model.validate_data(torch.tensor([[0.0, float("nan")]], dtype=torch.float64), None)
    with pytest.raises(ValueError):
        model.validate_data(None, None)


@pytest.mark.parametrize(
    "config",
    [
        {"dim": 0, "components": 2},
        {"dim": 2, "components": 0},
        {"dim": 2, "components": -1},
        {"dim": True, "components": 2},
        {"dim": 2, "components": True},
        {"dim": 2, "components": 2.5},
    ],
)
def test_bad_config_raises(config: dict) -> None:
    with pytest.raises(ModelConfigError):
        GaussianMixture(**config)


def test_config_round_trip_and_layout() -> None:
    model = GaussianMixture(3, components=4)
    assert model.param_dim == 3 + 2 * 4 * 3
    assert not model.has_target and model.input_dim == 3
    assert GaussianMixture(**model.config()).config() == {"dim": 3, "components": 4}
