"""Negative binomial regression: counts more spread out than a Poisson's.

y ~ NB(mean μ, overdispersion φ) with log μ = wᵀx + b, so that Var y = μ + φμ² (φ → 0 is
Poisson regression); priors (w, b) ~ N(0, τ²I) and φ ~ Exponential(mean s). φ is positive, so θ
holds log φ: log_prior is the exponential density of φ plus the log-Jacobian
log |dφ/d log φ| = log φ.

With r = 1/φ and a = log(μφ) = log(μ/r), the probability of a count y is
Γ(y + r) / (Γ(r) y!) · (r/(r + μ))^r · (μ/(r + μ))^y, whose logs are −softplus(a) and
logsigmoid(a): computed so, neither underflows for large μ nor for small φ.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from modelcompare.models import Model, Prediction
from modelcompare.models.config import FamilyConfig, Integer, input_dim, scale
from modelcompare.models.target import COUNT, Target
from modelcompare.models.weighting import normalized_weights, weighted_mean_and_variance


class NegativeBinomialRegressionConfig(FamilyConfig):
    dim: Integer = input_dim(minimum=0)
    prior_std: float = scale(1.0, "τ: prior standard deviation of every weight and the bias")
    dispersion_scale: float = scale(
        1.0, "s: mean of the exponential prior on the overdispersion φ (Var y = μ + φμ²)")


class NegativeBinomialRegression(Model):
    """Counts with a log link and overdispersion: the variance μ + φμ² grows faster than the
    mean μ, as it does in counts of uneven exposure or clustered events."""

    family: ClassVar[str] = "negative_binomial_regression"
    Config: ClassVar[type[FamilyConfig]] = NegativeBinomialRegressionConfig

    def __init__(self, dim: int, prior_std: float = 1.0, dispersion_scale: float = 1.0) -> None:
        config = NegativeBinomialRegressionConfig.checked(
            dim=dim, prior_std=prior_std, dispersion_scale=dispersion_scale)
        self.input_dim = config.dim
        self.prior_std = config.prior_std
        self.dispersion_scale = config.dispersion_scale
        self.param_dim = config.dim + 2  # θ = (w, b, log φ)
        self.has_target = True

    def config(self) -> dict[str, Any]:
        return {"dim": self.input_dim, "prior_std": self.prior_std,
                "dispersion_scale": self.dispersion_scale}

    def target(self) -> Target:
        return COUNT

    def _log_mean(self, theta: Tensor, x: Tensor | None, rows: int) -> Tensor:
        """log μ = wᵀx_r + b per particle and row: (M, R)."""
        bias = theta[:, self.input_dim : self.input_dim + 1]
        if x is None:  # dim 0: the intercept alone
            return bias.expand(-1, rows)
        return theta[:, : self.input_dim] @ x.T + bias

    def log_prior(self, theta: Tensor) -> Tensor:
        weights, log_phi = theta[:, :-1], theta[:, -1]
        d = weights.shape[1]
        log_normal = -0.5 * (weights**2).sum(-1) / self.prior_std**2 - d * (
            math.log(self.prior_std) + 0.5 * math.log(2 * math.pi))
        # Exponential(mean s) at φ = exp(log φ), plus log |dφ/d log φ| = log φ.
        s = self.dispersion_scale
        log_exponential = -math.log(s) - torch.exp(log_phi) / s
        return log_normal + log_exponential + log_phi

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        assert y is not None
        log_phi = theta[:, -1:]
        a = self._log_mean(theta, x, y.shape[0]) + log_phi  # log(μ/r)
        r = torch.exp(-log_phi)
        return (torch.lgamma(y + r) - torch.lgamma(r) - torch.lgamma(y + 1.0)
                - r * F.softplus(a) + y * F.logsigmoid(a))

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        weights = self.prior_std * torch.randn(num, self.param_dim - 1, generator=generator,
                                               dtype=torch.float64, device=generator.device)
        phi = torch.empty(num, 1, dtype=torch.float64, device=generator.device).exponential_(
            1.0 / self.dispersion_scale, generator=generator)
        return torch.cat([weights, torch.log(phi)], dim=1)

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """Predictive mean E[μ] and variance E[μ + φμ²] + Var[μ] per row (the noise of each
        particle plus their spread), averaged with the weights; one row when x is None."""
        rows = 1 if x is None else x.shape[0]
        weights = normalized_weights(log_weights)
        mu = torch.exp(self._log_mean(theta, x, rows))
        mean, spread = weighted_mean_and_variance(mu, weights)
        noise = (weights[:, None] * (mu + torch.exp(theta[:, -1:]) * mu**2)).sum(0)
        return Prediction(mean=mean, variance=noise + spread)
