"""Bayesian Poisson regression with a log link: y ~ Poisson(exp(wᵀx + b)), (w, b) ~ N(0, τ²I).

θ = (w, b) multiplies Φ = [x, 1], so the log rate of each row is η = Φθ. Not conjugate: the
evidence has no closed form (``closed_form()`` is None), and the estimators reach it through the
likelihood and its gradient, log p(y | θ) = Σ_r y_r η_r − e^{η_r} − log y_r!, with
∇ = Σ_r (y_r − e^{η_r}) Φ_r (McCullagh & Nelder 1989, sec. 6.2).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from modelcompare.models.base import Model, Prediction
from modelcompare.models.config import FamilyConfig, Integer, input_dim, scale
from modelcompare.models.gaussian_linear import design
from modelcompare.models.glm_rows import residual_rows_times
from modelcompare.models.target import COUNT, Target
from modelcompare.models.weighting import normalized_weights, weighted_mean_and_variance


class PoissonRegressionConfig(FamilyConfig):
    dim: Integer = input_dim()
    prior_std: float = scale(1.0, "τ: prior standard deviation of every weight and the bias")


class PoissonRegression(Model):
    family: ClassVar[str] = "poisson_regression"
    Config: ClassVar[type[FamilyConfig]] = PoissonRegressionConfig

    def __init__(self, dim: int, prior_std: float = 1.0) -> None:
        config = PoissonRegressionConfig.checked(dim=dim, prior_std=prior_std)
        self.input_dim = config.dim
        self.prior_std = config.prior_std
        self.param_dim = config.dim + 1
        self.has_target = True

    def config(self) -> dict[str, Any]:
        return {"dim": self.input_dim, "prior_std": self.prior_std}

    def validate_data(self, x: Tensor | None, y: Tensor | None) -> None:
        super().validate_data(x, y)
        assert x is not None and y is not None
        if y.shape != (x.shape[0],):
            raise ValueError(
                f"{self.family} needs y of shape ({x.shape[0]},), got shape {tuple(y.shape)}"
            )

    def target(self) -> Target:
        return COUNT

    def _log_rate(self, theta: Tensor, x: Tensor) -> Tensor:
        """η = Φθ per particle and row: (M, R)."""
        return theta[:, :-1] @ x.T + theta[:, -1:]

    def log_prior(self, theta: Tensor) -> Tensor:
        return -0.5 * (theta**2).sum(-1) / self.prior_std**2 - self.param_dim * (
            math.log(self.prior_std) + 0.5 * math.log(2 * math.pi)
        )

    def grad_log_prior(self, theta: Tensor) -> Tensor:
        return -theta / self.prior_std**2

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        assert x is not None and y is not None
        eta = self._log_rate(theta, x)
        return y * eta - torch.exp(eta) - torch.lgamma(y + 1.0)

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> Tensor:
        return self.log_likelihood_and_grad(theta, x, y, row_weight)[1]

    def log_likelihood_and_grad(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        assert x is not None and y is not None
        eta = self._log_rate(theta, x)
        rate = torch.exp(eta)
        value = (y * eta - rate).sum(-1) - torch.lgamma(y + 1.0).sum()
        resid = (y - rate) * row_weight  # (M, R)
        grad = torch.cat([resid @ x, resid.sum(-1, keepdim=True)], dim=1)
        return value * row_weight, grad

    def row_grad_log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        assert x is not None and y is not None
        resid = y - torch.exp(self._log_rate(theta, x))  # (M, R)
        return resid[..., None] * design(x)

    def row_grad_log_likelihood_times(
        self,
        theta: Tensor,
        x: Tensor | None,
        y: Tensor | None,
        matrix: Tensor,
        anchor: Tensor | None = None,
    ) -> Tensor:
        """Row r's gradient is (y_r − exp(Φ_rᵀθ)) Φ_r, its difference from the anchor's
        (exp(Φ_rᵀθ_a) − exp(Φ_rᵀθ)) Φ_r (``glm_rows``)."""
        assert x is not None and y is not None
        rate = torch.exp(self._log_rate(theta, x))
        anchored = y if anchor is None else torch.exp(self._log_rate(anchor[None], x))
        resid = anchored - rate
        return residual_rows_times(resid, x, matrix)

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        return self.prior_std * torch.randn(
            num, self.param_dim, generator=generator, dtype=torch.float64, device=generator.device
        )

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """Predictive mean E[λ] and variance E[λ] + Var[λ] per row (Poisson noise plus spread)."""
        assert x is not None
        mean, spread = weighted_mean_and_variance(
            torch.exp(self._log_rate(theta, x)), normalized_weights(log_weights)
        )
        return Prediction(mean=mean, variance=mean + spread)
