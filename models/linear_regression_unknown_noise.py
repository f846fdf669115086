"""Bayesian linear regression with unknown noise: y = wᵀx + b + ε, ε ~ N(0, σ²).

Normal–Inverse-Gamma prior: σ² ~ InvGamma(a₀, b₀) and β = (w, b) | σ² ~ N(0, σ²τ²I). θ = (w, b,
log σ²). With Φ = [x, 1] the posterior is NIG with Λ = I/τ² + ΦᵀΦ, Λμ = h = Φᵀy, a = a₀ + n/2 and
b = b₀ + ½(yᵀy − hᵀΛ⁻¹h), and the evidence is (e.g. Murphy 2007, "Conjugate Bayesian analysis of
the Gaussian distribution", NIG regression)

    log p(y) = −(n/2) log 2π − D log τ − ½ log|Λ| + a₀ log b₀ − a log b + log Γ(a) − log Γ(a₀).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from modelcompare.models.base import ConjugateModel, Model, Prediction
from modelcompare.models.config import FamilyConfig, Integer, input_dim, scale
from modelcompare.models.gamma_poisson import log_gamma_moments, sample_log_gamma
from modelcompare.models.gaussian_linear import (
    GaussianPosterior,
    add_rows,
    design,
    prior_information,
    regression_inputs,
)
from modelcompare.models.nig_mean_field import NIGMeanField
from modelcompare.models.weighting import normalized_weights, weighted_mean_and_variance


class LinearRegressionUnknownNoiseConfig(FamilyConfig):
    dim: Integer = input_dim(minimum=0)
    prior_std: float = scale(1.0, "τ: prior standard deviation of weights and bias, in units of σ")
    noise_shape: float = scale(1.0, "a₀: shape of the inverse-gamma prior on the noise variance σ²")
    noise_scale: float = scale(1.0, "b₀: scale of the inverse-gamma prior on the noise variance σ²")


class LinearRegressionUnknownNoise(Model, ConjugateModel):
    family: ClassVar[str] = "linear_regression_unknown_noise"
    Config: ClassVar[type[FamilyConfig]] = LinearRegressionUnknownNoiseConfig

    def __init__(
        self,
        dim: int,
        prior_std: float = 1.0,
        noise_shape: float = 1.0,
        noise_scale: float = 1.0,
    ) -> None:
        config = LinearRegressionUnknownNoiseConfig.checked(
            dim=dim, prior_std=prior_std, noise_shape=noise_shape, noise_scale=noise_scale
        )
        self.input_dim = config.dim
        self.prior_std = config.prior_std
        self.noise_shape = config.noise_shape
        self.noise_scale = config.noise_scale
        self.param_dim = config.dim + 2
        self.has_target = True

    def config(self) -> dict[str, Any]:
        return {
            "dim": self.input_dim,
            "prior_std": self.prior_std,
            "noise_shape": self.noise_shape,
            "noise_scale": self.noise_scale,
        }

    def _mean(self, theta: Tensor, x: Tensor) -> Tensor:
        return theta[:, :-2] @ x.T + theta[:, -2:-1]

    def log_prior(self, theta: Tensor) -> Tensor:
        # InvGamma(σ²) · dσ²/ds (= σ²) with s = log σ², times N(β; 0, σ²τ²I).
        a0, b0, tau2 = self.noise_shape, self.noise_scale, self.prior_std**2
        p = self.param_dim - 1
        s = theta[:, -1]
        beta2 = (theta[:, :-1] ** 2).sum(-1)
        return (
            a0 * math.log(b0)
            - math.lgamma(a0)
            - a0 * s
            - b0 * torch.exp(-s)
            - 0.5 * p * (math.log(2 * math.pi * tau2) + s)
            - 0.5 * beta2 * torch.exp(-s) / tau2
        )

    def grad_log_prior(self, theta: Tensor) -> Tensor:
        a0, b0, tau2 = self.noise_shape, self.noise_scale, self.prior_std**2
        p = self.param_dim - 1
        prec = torch.exp(-theta[:, -1:]) / tau2
        beta = theta[:, :-1]
        grad_s = -a0 + b0 * tau2 * prec - 0.5 * p + 0.5 * (beta**2).sum(-1, keepdim=True) * prec
        return torch.cat([-beta * prec, grad_s], dim=1)

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        s = theta[:, -1:]
        resid = y - self._mean(theta, x)
        return -0.5 * (resid**2 * torch.exp(-s) + s + math.log(2 * math.pi))

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> Tensor:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        resid = y - self._mean(theta, x)
        scaled = resid * (row_weight * torch.exp(-theta[:, -1:]))  # (M, R)
        grad_s = 0.5 * (scaled * resid).sum(-1, keepdim=True) - 0.5 * row_weight * y.shape[0]
        return torch.cat([scaled @ x, scaled.sum(-1, keepdim=True), grad_s], dim=1)

    def log_likelihood_and_grad(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        total = self.log_likelihood(theta, x, y).sum(-1) * row_weight
        return total, self.grad_log_likelihood(theta, x, y, row_weight)

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        log_var = math.log(self.noise_scale) - sample_log_gamma(self.noise_shape, num, generator)
        shape = (num, self.param_dim - 1)
        z = torch.randn(shape, generator=generator, dtype=torch.float64, device=generator.device)
        beta = z * (self.prior_std * torch.exp(0.5 * log_var))[:, None]
        return torch.cat([beta, log_var[:, None]], dim=1)

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        x = regression_inputs(self.input_dim, x, None)
        weights = normalized_weights(log_weights)
        mean, spread = weighted_mean_and_variance(self._mean(theta, x), weights)
        noise = (weights * torch.exp(theta[:, -1])).sum()
        return Prediction(mean=mean, variance=spread + noise)

    def mean_field(self) -> NIGMeanField:
        return NIGMeanField(self.input_dim, self.prior_std, self.noise_shape, self.noise_scale)

    # --- conjugate oracle -------------------------------------------------------------------

    def closed_form(self) -> ConjugateModel:
        return self

    def prior_stats(self) -> dict[str, Tensor]:
        return {
            **prior_information(self.param_dim - 1, self.prior_std),
            "a": torch.tensor(self.noise_shape, dtype=torch.float64),
            "b": torch.tensor(self.noise_scale, dtype=torch.float64),
        }

    def update_stats(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> dict[str, Tensor]:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        after = add_rows(stats, x, y)
        quad = GaussianPosterior.of(after).quadratic()
        return {
            **after,
            "a": self.noise_shape + 0.5 * after["count"],
            "b": self.noise_scale + 0.5 * (after["sum_y2"] - quad),
        }

    def predict_from_stats(self, stats: dict[str, Tensor], x: Tensor | None) -> Prediction:
        """y* ~ Student-t_{2a}(φᵀμ, (b/a)(1 + φᵀΛ⁻¹φ)): variance b/(a−1)·(1 + φᵀΛ⁻¹φ) for a > 1,
        infinite otherwise (Murphy 2007, "Conjugate Bayesian analysis of the Gaussian", eq. 111)."""
        x = regression_inputs(self.input_dim, x, None)
        mean, spread = GaussianPosterior.of(stats).predictive_terms(x)
        return Prediction(mean=mean, variance=self._noise_variance(stats) * (1.0 + spread))

    def posterior_moments(self, stats: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """β | σ² ~ N(μ, σ²Λ⁻¹), σ² ~ InvGamma(a, b): Var β = E[σ²] diag Λ⁻¹ = b/(a−1) diag Λ⁻¹;
        1/σ² ~ Gamma(a, b), so log σ² has mean log b − ψ(a) and variance ψ'(a)."""
        posterior = GaussianPosterior.of(stats)
        spread = posterior.variances()
        log_mean, log_var = log_gamma_moments(stats["a"], torch.log(stats["b"]))
        return (
            torch.cat([posterior.mean(), -log_mean[None]]),
            torch.cat([self._noise_variance(stats) * spread, log_var[None]]),
        )

    @staticmethod
    def _noise_variance(stats: dict[str, Tensor]) -> Tensor:
        """E[σ²] = b / (a − 1) for a > 1, infinite otherwise."""
        a, b = stats["a"], stats["b"]
        return (
            b / (a - 1.0)
            if float(a) > 1.0
            else torch.tensor(torch.inf, dtype=b.dtype, device=b.device)
        )

    def log_evidence_from_stats(self, stats: dict[str, Tensor]) -> Tensor:
        a0, b0 = self.noise_shape, self.noise_scale
        return (
            -0.5 * stats["count"] * math.log(2 * math.pi)
            - (self.param_dim - 1) * math.log(self.prior_std)
            - 0.5 * GaussianPosterior.of(stats).log_det()
            + a0 * math.log(b0)
            - stats["a"] * torch.log(stats["b"])
            + torch.lgamma(stats["a"])
            - math.lgamma(a0)
        )

    def log_predictive(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> Tensor:
        after = self.update_stats(stats, x, y)
        return self.log_evidence_from_stats(after) - self.log_evidence_from_stats(stats)

    def batch_log_evidence(self, x: Tensor | None, y: Tensor | None) -> Tensor:
        """y ~ St_ν(0, Σ), ν = 2a₀, Σ = (b₀/a₀)(I + τ²ΦΦᵀ): the marginal in data space."""
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        n = y.shape[0]
        nu = 2.0 * self.noise_shape
        phi = design(x)
        cov = torch.eye(n, dtype=y.dtype, device=y.device) + self.prior_std**2 * phi @ phi.T
        cov = cov * (self.noise_scale / self.noise_shape)
        chol = torch.linalg.cholesky(cov)
        white = torch.linalg.solve_triangular(chol, y[:, None], upper=False)[:, 0]
        return (
            math.lgamma(0.5 * (nu + n))
            - math.lgamma(0.5 * nu)
            - 0.5 * n * math.log(nu * math.pi)
            - torch.log(torch.diagonal(chol)).sum()
            - 0.5 * (nu + n) * torch.log1p((white**2).sum() / nu)
        )
