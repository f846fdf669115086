"""Gamma–Poisson: y_r ~ Poisson(λ) i.i.d., λ ~ Gamma(shape a, rate b); no inputs.

θ = log λ. The posterior is Gamma(a + Σy, b + n) and the one-step predictive is negative binomial,
p(y | a, b) = NB(y; a, b/(b+1)) (Gelman et al., BDA3 §2.6).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from modelcompare.models.base import ConjugateModel, Model, Prediction
from modelcompare.models.config import FamilyConfig, scale
from modelcompare.models.target import COUNT, Target
from modelcompare.models.weighting import normalized_weights, weighted_mean_and_variance


def sample_log_gamma(
    shape: float, num: int, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> Tensor:
    """log G for G ~ Gamma(shape, 1), exact for small shapes where G itself underflows.

    Uses G(a) = G(a + 1)·U^(1/a) with U ~ Uniform(0, 1] (Marsaglia & Tsang 2000, §6).
    """
    boosted = torch._standard_gamma(
        torch.full((num,), shape + 1.0, dtype=dtype, device=generator.device), generator=generator
    )
    uniform = 1.0 - torch.rand(num, generator=generator, dtype=dtype, device=generator.device)
    return torch.log(boosted) + torch.log(uniform) / shape


def log_gamma_moments(shape: Tensor, log_rate: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and variance of log λ for λ ~ Gamma(shape, rate): ψ(a) − log b and ψ'(a)."""
    return torch.digamma(shape) - log_rate, torch.special.polygamma(1, shape)


class GammaPoissonConfig(FamilyConfig):
    shape: float = scale(1.0, "a: shape of the Gamma(a, b) prior on the rate λ")
    rate: float = scale(1.0, "b: rate of the Gamma(a, b) prior on the rate λ")


class GammaPoisson(Model, ConjugateModel):
    family: ClassVar[str] = "gamma_poisson"
    Config: ClassVar[type[FamilyConfig]] = GammaPoissonConfig

    def __init__(self, shape: float = 1.0, rate: float = 1.0) -> None:
        config = GammaPoissonConfig.checked(shape=shape, rate=rate)
        self.shape = config.shape
        self.rate = config.rate
        self.param_dim = 1
        self.input_dim = 0
        self.has_target = True

    def config(self) -> dict[str, Any]:
        return {"shape": self.shape, "rate": self.rate}

    def validate_data(self, x: Tensor | None, y: Tensor | None) -> None:
        super().validate_data(x, y)
        assert y is not None
        if y.ndim != 1:
            raise ValueError(f"{self.family} needs y of shape (R,), got shape {tuple(y.shape)}")

    def target(self) -> Target:
        return COUNT

    def log_prior(self, theta: Tensor) -> Tensor:
        # Gamma density at λ = e^θ times the Jacobian dλ/dθ = λ.
        a, b = self.shape, self.rate
        t = theta[:, 0]
        return a * math.log(b) - math.lgamma(a) + a * t - b * torch.exp(t)

    def grad_log_prior(self, theta: Tensor) -> Tensor:
        return self.shape - self.rate * torch.exp(theta)

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        assert y is not None
        return y * theta - torch.exp(theta) - torch.lgamma(y + 1.0)

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> Tensor:
        assert y is not None
        return row_weight * (y.sum() - y.shape[0] * torch.exp(theta))

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        return (sample_log_gamma(self.shape, num, generator) - math.log(self.rate))[:, None]

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """Predictive mean E[λ] and variance E[λ] + Var[λ] (Poisson variance plus spread)."""
        rows = 1 if x is None else x.shape[0]
        mean, spread = weighted_mean_and_variance(
            torch.exp(theta[:, 0]), normalized_weights(log_weights)
        )
        return Prediction(mean=mean.expand(rows), variance=(mean + spread).expand(rows))

    # --- conjugate oracle -------------------------------------------------------------------

    def closed_form(self) -> ConjugateModel:
        return self

    def prior_stats(self) -> dict[str, Tensor]:
        return {
            "shape": torch.tensor(self.shape, dtype=torch.float64),
            "rate": torch.tensor(self.rate, dtype=torch.float64),
        }

    def predict_from_stats(self, stats: dict[str, Tensor], x: Tensor | None) -> Prediction:
        """Negative-binomial predictive: mean a/b, variance a/b + a/b² (shape a, rate b)."""
        rows = 1 if x is None else x.shape[0]
        mean = stats["shape"] / stats["rate"]
        variance = mean + stats["shape"] / stats["rate"] ** 2
        return Prediction(mean=mean.expand(rows), variance=variance.expand(rows))

    def posterior_moments(self, stats: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        mean, var = log_gamma_moments(stats["shape"], torch.log(stats["rate"]))
        return mean[None], var[None]

    def update_stats(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> dict[str, Tensor]:
        assert y is not None
        return {"shape": stats["shape"] + y.sum(), "rate": stats["rate"] + y.shape[0]}

    def log_predictive(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> Tensor:
        """Chain rule over the chunk's rows: Σ_r log NB(y_r; a_r, b_r/(b_r+1)), where
        a_r = a + Σ_{s<r} y_s and b_r = b + r are the posterior before row r."""
        assert y is not None
        a = stats["shape"] + torch.cumsum(y, 0) - y
        b = stats["rate"] + torch.arange(y.shape[0], dtype=y.dtype, device=y.device)
        log_nb = (
            torch.lgamma(y + a)
            - torch.lgamma(a)
            - torch.lgamma(y + 1.0)
            + a * torch.log(b / (b + 1.0))
            - y * torch.log(b + 1.0)
        )
        return log_nb.sum()

    def batch_log_evidence(self, x: Tensor | None, y: Tensor | None) -> Tensor:
        """log p(y) = log Γ(a+S) − log Γ(a) + a log b − (a+S) log(b+n) − Σ log y_r!, S = Σy."""
        assert y is not None
        a, b = self.shape, self.rate
        total, n = y.sum(), y.shape[0]
        return (
            torch.lgamma(a + total)
            - math.lgamma(a)
            + a * math.log(b)
            - (a + total) * math.log(b + n)
            - torch.lgamma(y + 1.0).sum()
        )
