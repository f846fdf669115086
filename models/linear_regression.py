"""Bayesian linear regression with known noise: y = wᵀx + b + ε, ε ~ N(0, σ²), (w, b) ~ N(0, τ²I).

Conjugate: the posterior over β = (w, b) is Gaussian with precision Λ = I/τ² + ΦᵀΦ/σ² and
Λμ = h = Φᵀy/σ², where Φ = [x, 1] (Bishop, PRML eq. 3.50-3.51). ``dim=0`` is the intercept-only
model y = b + ε (Φ = 1), the natural null model of a comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from modelcompare.models.base import ConjugateModel, Model, Prediction
from modelcompare.models.config import FamilyConfig, Integer, input_dim, scale
from modelcompare.models.gaussian_linear import (
    GaussianPosterior,
    add_rows,
    design,
    prior_information,
    regression_inputs,
)
from modelcompare.models.glm_rows import residual_rows_times
from modelcompare.models.weighting import (
    WeightedRows,
    joined_rows,
    normalized_weights,
    stepwise_rows,
    weighted_mean_and_variance,
)


class LinearRegressionConfig(FamilyConfig):
    dim: Integer = input_dim(minimum=0)
    noise_std: float = scale(1.0, "σ: standard deviation of the observation noise ε")
    prior_std: float = scale(1.0, "τ: prior standard deviation of every weight and the bias")


class LinearRegression(Model, ConjugateModel):
    family: ClassVar[str] = "linear_regression"
    Config: ClassVar[type[FamilyConfig]] = LinearRegressionConfig
    gradients_read_rows: ClassVar[bool] = False  # GaussianRows: Φᵀ W Φ and Φᵀ W y

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
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float | Tensor = 1.0
    ) -> Tensor:
        """``row_weight`` is one weight, or (R,) weights of the rows (``_of_parts``)."""
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        resid = (y - self._mean(theta, x)) * (row_weight / self.noise_std**2)  # (M, R)
        return torch.cat([resid @ x, resid.sum(-1, keepdim=True)], dim=1)

    def row_grad_log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        resid = (y - self._mean(theta, x)) / self.noise_std**2  # (M, R)
        return resid[..., None] * design(x)

    def row_grad_log_likelihood_times(
        self,
        theta: Tensor,
        x: Tensor | None,
        y: Tensor | None,
        matrix: Tensor,
        anchor: Tensor | None = None,
    ) -> Tensor:
        """Row r's gradient is (y_r − Φ_rᵀθ) Φ_r / σ², its difference from the anchor's
        Φ_rᵀ(θ_a − θ) Φ_r / σ² (``glm_rows``)."""
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        if anchor is None:
            resid = y - self._mean(theta, x)
        else:
            resid = self._mean(anchor[None], x) - self._mean(theta, x)
        return residual_rows_times(resid / self.noise_std**2, x, matrix)

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

    def log_likelihood_and_grad_of_parts(
        self, theta: Tensor, parts: Sequence[WeightedRows]
    ) -> tuple[Tensor, Tensor]:
        """One pass over every part's rows, each row weighted by its part's weight."""
        return self.weighted_sum(parts).value_and_grad(theta)

    def grad_log_likelihood_of_parts(self, theta: Tensor, parts: Sequence[WeightedRows]) -> Tensor:
        return self.weighted_sum(parts).grad(theta)

    def weighted_sum(self, parts: Sequence[WeightedRows]) -> GaussianRows:
        x, y, weights = joined_rows(parts)
        return self._rows(regression_inputs(self.input_dim, x, y), y, weights)

    def stepwise_sums(
        self, fixed: Sequence[WeightedRows], streams: Sequence[WeightedRows], steps: int
    ) -> list[GaussianRows]:
        """Every slice's rows joined after ``fixed`` in one (steps, R, ·) block."""
        x, y, weights = stepwise_rows(fixed, streams, steps)
        assert y is not None
        x = x if self.input_dim else y.new_zeros(*y.shape, 0)
        assert x is not None
        rows = self._rows(x, y, weights)
        return [GaussianRows(self, *(part[i] for part in rows[1:])) for i in range(steps)]

    def _rows(self, x: Tensor, y: Tensor | None, weights: Tensor) -> GaussianRows:
        """The rows (..., R, ·) with their weighted normal equations: Φᵀ W Φ / σ² and
        Φᵀ W y / σ², W = diag(weights)."""
        assert y is not None
        constant = math.log(self.noise_std) + 0.5 * math.log(2 * math.pi)
        precision_weights = weights / self.noise_std**2
        phi = design(x)
        weighted_phi = phi * precision_weights[..., None]
        gram = weighted_phi.transpose(-1, -2) @ phi
        moment = (weighted_phi * y[..., None]).sum(-2)
        return GaussianRows(
            self, x, y, weights, precision_weights, weights.sum(-1) * constant, gram, moment
        )

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        return self.prior_std * torch.randn(
            num, self.param_dim, generator=generator, dtype=torch.float64, device=generator.device
        )

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        x = regression_inputs(self.input_dim, x, None)
        mean, variance = weighted_mean_and_variance(
            self._mean(theta, x), normalized_weights(log_weights)
        )
        return Prediction(mean=mean, variance=variance + self.noise_std**2)

    # --- conjugate oracle -------------------------------------------------------------------

    def closed_form(self) -> ConjugateModel:
        return self

    def prior_stats(self) -> dict[str, Tensor]:
        return prior_information(self.param_dim, self.prior_std)

    def update_stats(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> dict[str, Tensor]:
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        return add_rows(stats, x, y, self.noise_std**2)

    def predict_from_stats(self, stats: dict[str, Tensor], x: Tensor | None) -> Prediction:
        """y* ~ N(φᵀμ, σ² + φᵀΛ⁻¹φ) (PRML eq. 3.58-3.59)."""
        x = regression_inputs(self.input_dim, x, None)
        mean, spread = GaussianPosterior.of(stats).predictive_terms(x)
        return Prediction(mean=mean, variance=self.noise_std**2 + spread)

    def posterior_moments(self, stats: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        posterior = GaussianPosterior.of(stats)
        return posterior.mean(), posterior.variances()

    def log_evidence_from_stats(self, stats: dict[str, Tensor]) -> Tensor:
        """log p(y_1..n) = -n/2 log 2πσ² - Σy²/2σ² + ½hᵀΛ⁻¹h - ½log|Λ| - D log τ (PRML 3.86)."""
        posterior = GaussianPosterior.of(stats)
        s2 = self.noise_std**2
        return (
            -0.5 * stats["count"] * math.log(2 * math.pi * s2)
            - 0.5 * stats["sum_y2"] / s2
            + 0.5 * posterior.quadratic()
            - 0.5 * posterior.log_det()
            - self.param_dim * math.log(self.prior_std)
        )

    def log_predictive(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> Tensor:
        after = self.update_stats(stats, x, y)
        return self.log_evidence_from_stats(after) - self.log_evidence_from_stats(stats)

    def batch_log_evidence(self, x: Tensor | None, y: Tensor | None) -> Tensor:
        """y ~ N(0, σ²I + τ²ΦΦᵀ): the marginal in data space, a path independent of the stats."""
        x = regression_inputs(self.input_dim, x, y)
        assert y is not None
        phi = design(x)
        cov = self.noise_std**2 * torch.eye(y.shape[0], dtype=torch.float64, device=y.device)
        cov = cov + self.prior_std**2 * phi @ phi.T
        dist = torch.distributions.MultivariateNormal(torch.zeros_like(y), covariance_matrix=cov)
        return dist.log_prob(y)


class GaussianRows(NamedTuple):
    """Weighted rows of a linear regression prepared for many θ (``Model.weighted_sum``)."""

    model: LinearRegression
    x: Tensor  # (R, dim)
    y: Tensor  # (R,)
    weights: Tensor  # (R,)
    precision_weights: Tensor  # (R,) the weights over σ²
    normalizer: Tensor  # () Σ_r w_r (log σ + log(2π) / 2)
    gram: Tensor  # (D, D) Σ_r w_r Φ_r Φ_rᵀ / σ²
    moment: Tensor  # (D,) Σ_r w_r y_r Φ_r / σ²

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        resid = self.y - self.model._mean(theta, self.x)  # (M, R)
        total = -0.5 * (resid**2) @ self.weights / self.model.noise_std**2 - self.normalizer
        scaled = resid * self.precision_weights
        return total, torch.cat([scaled @ self.x, scaled.sum(-1, keepdim=True)], dim=1)

    def grad(self, theta: Tensor) -> Tensor:
        """Σ_r w_r (y_r − Φ_rᵀθ) Φ_r / σ² = moment − gram θ: affine in θ, so D² numbers per
        particle instead of a pass over the rows."""
        return self.moment - theta @ self.gram
