"""Bayesian linear regression with known noise: y = wᵀx + b + ε, ε ~ N(0, σ²), (w, b) ~ N(0, τ²I).

Conjugate: the posterior over β = (w, b) is Gaussian with precision Λ = I/τ² + ΦᵀΦ/σ² and
Λμ = h = Φᵀy/σ², where Φ = [x, 1] (Bishop, PRML eq. 3.50-3.51). ``dim=0`` is the intercept-only
model y = b + ε (Φ = 1), the natural null model of a comparison.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from models.base import ConjugateModel, Model, Prediction
from models.config import FamilyConfig, Integer, input_dim, scale
from models.weighting import normalized_weights, weighted_mean_and_variance


def design(x: Tensor) -> Tensor:
    """Φ = [x, 1]: the inputs with a bias column appended."""
    return torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)], dim=1)


def regression_inputs(dim: int, x: Tensor | None, y: Tensor | None) -> Tensor:
    """``x``, or for an intercept-only model (``dim`` 0) empty (R, 0) inputs with the rows of
    ``x`` or ``y`` (one row when both are None)."""
    if dim:
        assert x is not None
        return x
    reference = x if x is not None else y
    rows = 1 if reference is None else reference.shape[0]
    device = None if reference is None else reference.device
    return torch.zeros(rows, 0, dtype=torch.float64, device=device)


def gaussian_predictive_terms(stats: dict[str, Tensor], phi: Tensor) -> tuple[Tensor, Tensor]:
    """φᵀμ and φᵀΛ⁻¹φ per query row, for a Gaussian posterior in information form (Λ, h = Λμ)."""
    chol = torch.linalg.cholesky(stats["precision"])
    mean = phi @ torch.cholesky_solve(stats["shift"][:, None], chol)[:, 0]
    spread = (phi * torch.cholesky_solve(phi.T, chol).T).sum(-1)
    return mean, spread


class LinearRegressionConfig(FamilyConfig):
    dim: Integer = input_dim(minimum=0)
    noise_std: float = scale(1.0, "σ: standard deviation of the observation noise ε")
    prior_std: float = scale(1.0, "τ: prior standard deviation of every weight and the bias")


class LinearRegression(Model, ConjugateModel):
    family: ClassVar[str] = "linear_regression"
    Config: ClassVar[type[FamilyConfig]] = LinearRegressionConfig

    def __init__(self, dim: int, noise_std: float = 1.0, prior_std: float = 1.0) -> None:
        config = LinearRegressionConfig.checked(dim=dim, noise_std=noise_std, prior_std=prior_std)
        self.input_dim = config.dim
        self.noise_std = config.noise_std
        self.prior_std = config.prior_std
        self.param_dim = config.dim + 1
        self.has_target = True

    def config(self) -> dict[str, Any]:
        return {"dim": self.input_dim, "noise_std": self.noise_std, "prior_std": self.prior_std}

    def _mean(self, theta: Tensor, x: Tensor) -> Tensor:
        return theta[:, :-1] @ x.T + theta[:, -1:]

    def log_prior(self, theta: Tensor) -> Tensor:
        d = self.param_dim
        return -0.5 * (theta**2).sum(-1) / self.prior_std**2 - d * (
            math.log(self.prior_std) + 0.5 * math.log(2 * math.pi)
        )

    def grad_log_prior(self, theta: Tensor) -> Tensor:
        return -theta / self.prior_std**2

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        resid = y - self._mean(theta, x)
        return -0.5 * resid**2 / self.noise_std**2 - (
            math.log(self.noise_std) + 0.5 * math.log(2 * math.pi)
        )

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> Tensor:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        resid = (y - self._mean(theta, x)) * (row_weight / self.noise_std**2)  # (M, R)
        return torch.cat([resid @ x, resid.sum(-1, keepdim=True)], dim=1)

    def row_grad_log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        resid = (y - self._mean(theta, x)) / self.noise_std**2  # (M, R)
        return resid[..., None] * design(x)

    def log_likelihood_and_grad(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        resid = y - self._mean(theta, x)  # (M, R)
        s2 = self.noise_std**2
        total = -0.5 * (resid**2).sum(-1) / s2 - y.shape[0] * (
            math.log(self.noise_std) + 0.5 * math.log(2 * math.pi)
        )
        scaled = resid * (row_weight / s2)
        grad = torch.cat([scaled @ x, scaled.sum(-1, keepdim=True)], dim=1)
        return total * row_weight, grad

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        return self.prior_std * torch.randn(
            num, self.param_dim, generator=generator, dtype=torch.float64
        )

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        x = regression_inputs(self.input_dim, x, None)
        mean, variance = weighted_mean_and_variance(
            self._mean(theta, x), normalized_weights(log_weights)
        )
        return Prediction(mean=mean, variance=variance + self.noise_std**2)

    # --- conjugate oracle -------------------------------------------------------------------

    def prior_stats(self) -> dict[str, Tensor]:
        d = self.param_dim
        return {
            "precision": torch.eye(d, dtype=torch.float64) / self.prior_std**2,
            "shift": torch.zeros(d, dtype=torch.float64),
            "count": torch.zeros((), dtype=torch.float64),
            "sum_y2": torch.zeros((), dtype=torch.float64),
        }

    def update_stats(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> dict[str, Tensor]:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        phi = design(x)
        s2 = self.noise_std**2
        return {
            "precision": stats["precision"] + phi.T @ phi / s2,
            "shift": stats["shift"] + phi.T @ y / s2,
            "count": stats["count"] + y.shape[0],
            "sum_y2": stats["sum_y2"] + (y**2).sum(),
        }

    def predict_from_stats(self, stats: dict[str, Tensor], x: Tensor | None) -> Prediction:
        """y* ~ N(φᵀμ, σ² + φᵀΛ⁻¹φ) (PRML eq. 3.58-3.59)."""
        x = regression_inputs(self.input_dim, x, None)
        mean, spread = gaussian_predictive_terms(stats, design(x))
        return Prediction(mean=mean, variance=self.noise_std**2 + spread)

    def _log_evidence_from_stats(self, stats: dict[str, Tensor]) -> Tensor:
        """log p(y_1..n) = -n/2 log 2πσ² - Σy²/2σ² + ½hᵀΛ⁻¹h - ½log|Λ| - D log τ (PRML 3.86)."""
        chol = torch.linalg.cholesky(stats["precision"])
        half_quad = 0.5 * (torch.cholesky_solve(stats["shift"][:, None], chol)[:, 0]
                           * stats["shift"]).sum()
        log_det = 2.0 * torch.log(torch.diagonal(chol)).sum()
        s2 = self.noise_std**2
        return (
            -0.5 * stats["count"] * math.log(2 * math.pi * s2)
            - 0.5 * stats["sum_y2"] / s2
            + half_quad
            - 0.5 * log_det
            - self.param_dim * math.log(self.prior_std)
        )

    def log_predictive(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> Tensor:
        after = self.update_stats(stats, x, y)
        return self._log_evidence_from_stats(after) - self._log_evidence_from_stats(stats)

    def batch_log_evidence(self, x: Tensor | None, y: Tensor | None) -> Tensor:
        """y ~ N(0, σ²I + τ²ΦΦᵀ): the marginal in data space, a path independent of the stats."""
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        phi = design(x)
        cov = self.noise_std**2 * torch.eye(y.shape[0], dtype=torch.float64)
        cov = cov + self.prior_std**2 * phi @ phi.T
        dist = torch.distributions.MultivariateNormal(torch.zeros_like(y), covariance_matrix=cov)
        return dist.log_prob(y)
