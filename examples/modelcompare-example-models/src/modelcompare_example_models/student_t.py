"""Robust linear regression with Student-t noise: a complete model of your own.

y = wᵀx + b + σ·ε with ε ~ t_ν (ν fixed), priors (w, b) ~ N(0, τ²I) and σ ~ HalfNormal(s).
σ is positive, so θ holds log σ: the prior draws σ and takes its log, and log_prior is the
density of log σ, the half-normal density of σ plus the log-Jacobian log |dσ/d log σ| = log σ.

Check it with ``modelcompare check-model modelcompare_example_models:StudentTRegression --config
'{"dim": 2}'`` once the package is installed (docs/guide/writing-models.md).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from pydantic import Field
from torch import Tensor

from modelcompare.models import Model, Prediction
from modelcompare.models.config import FamilyConfig, Integer, input_dim, scale
from modelcompare.models.weighting import normalized_weights, weighted_mean_and_variance


class StudentTRegressionConfig(FamilyConfig):
    dim: Integer = input_dim(minimum=0)
    dof: float = Field(4.0, gt=2.0, le=1000.0,
                       description="ν: degrees of freedom of the noise (> 2: finite variance)")
    prior_std: float = scale(1.0, "τ: prior standard deviation of every weight and the bias")
    noise_scale: float = scale(1.0, "s: scale of the half-normal prior on the noise scale σ")


class StudentTRegression(Model):
    """Linear regression with Student-t noise of fixed degrees of freedom: outliers cost it
    less than they cost a normal model."""

    family: ClassVar[str] = "student_t_regression"
    Config: ClassVar[type[FamilyConfig]] = StudentTRegressionConfig

    def __init__(self, dim: int, dof: float = 4.0, prior_std: float = 1.0,
                 noise_scale: float = 1.0) -> None:
        config = StudentTRegressionConfig.checked(dim=dim, dof=dof, prior_std=prior_std,
                                                  noise_scale=noise_scale)
        self.input_dim = config.dim
        self.dof = config.dof
        self.prior_std = config.prior_std
        self.noise_scale = config.noise_scale
        self.param_dim = config.dim + 2  # θ = (w, b, log σ)
        self.has_target = True

    def config(self) -> dict[str, Any]:
        return {"dim": self.input_dim, "dof": self.dof, "prior_std": self.prior_std,
                "noise_scale": self.noise_scale}

    def _mean(self, theta: Tensor, x: Tensor | None, rows: int) -> Tensor:
        """wᵀx_r + b per particle and row: (M, R)."""
        bias = theta[:, self.input_dim : self.input_dim + 1]
        if x is None:  # dim 0: the intercept alone
            return bias.expand(-1, rows)
        return theta[:, : self.input_dim] @ x.T + bias

    def log_prior(self, theta: Tensor) -> Tensor:
        weights, log_sigma = theta[:, :-1], theta[:, -1]
        d = weights.shape[1]
        log_normal = -0.5 * (weights**2).sum(-1) / self.prior_std**2 - d * (
            math.log(self.prior_std) + 0.5 * math.log(2 * math.pi))
        # HalfNormal(s) at σ = exp(log σ), plus log |dσ/d log σ| = log σ.
        log_half_normal = (0.5 * math.log(2 / math.pi) - math.log(self.noise_scale)
                           - 0.5 * torch.exp(2 * log_sigma) / self.noise_scale**2)
        return log_normal + log_half_normal + log_sigma

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        assert y is not None
        log_sigma = theta[:, -1:]
        z = (y - self._mean(theta, x, y.shape[0])) * torch.exp(-log_sigma)
        nu = self.dof
        constant = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)
        return constant - log_sigma - 0.5 * (nu + 1) * torch.log1p(z**2 / nu)

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        normal = torch.randn(num, self.param_dim, generator=generator, dtype=torch.float64,
                             device=generator.device)
        weights = self.prior_std * normal[:, :-1]
        log_sigma = torch.log(self.noise_scale * normal[:, -1:].abs())  # σ = s|z|
        return torch.cat([weights, log_sigma], dim=1)

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """Predictive mean and variance per row: the particles' spread plus the noise's
        variance σ²ν/(ν − 2), averaged with the weights; one row when x is None."""
        rows = 1 if x is None else x.shape[0]
        weights = normalized_weights(log_weights)
        mean, spread = weighted_mean_and_variance(self._mean(theta, x, rows), weights)
        noise = (weights * torch.exp(2 * theta[:, -1])).sum() * self.dof / (self.dof - 2)
        return Prediction(mean=mean, variance=spread + noise)
