"""Beta–Bernoulli: y_r ~ Bernoulli(p) i.i.d., p ~ Beta(α, β); no inputs.

θ = logit p. The posterior is Beta(α + k, β + n − k) with k = Σy (Gelman et al., BDA3 §2.4).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from modelcompare.models.base import ConjugateModel, Model, Prediction
from modelcompare.models.config import FamilyConfig, scale
from modelcompare.models.gamma_poisson import sample_log_gamma
from modelcompare.models.target import Target, labels
from modelcompare.models.weighting import normalized_weights


def log_beta(a: Tensor | float, b: Tensor | float) -> Tensor:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)


class BetaBernoulliConfig(FamilyConfig):
    alpha: float = scale(1.0, "α of the Beta(α, β) prior on p (prior successes)")
    beta: float = scale(1.0, "β of the Beta(α, β) prior on p (prior failures)")


class BetaBernoulli(Model, ConjugateModel):
    family: ClassVar[str] = "beta_bernoulli"
    Config: ClassVar[type[FamilyConfig]] = BetaBernoulliConfig

    def __init__(self, alpha: float = 1.0, beta: float = 1.0) -> None:
        config = BetaBernoulliConfig.checked(alpha=alpha, beta=beta)
        self.alpha = config.alpha
        self.beta = config.beta
        self.param_dim = 1
        self.input_dim = 0
        self.has_target = True

    def config(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "beta": self.beta}

    def validate_data(self, x: Tensor | None, y: Tensor | None) -> None:
        super().validate_data(x, y)
        assert y is not None
        if y.ndim != 1:
            raise ValueError(f"{self.family} needs y of shape (R,), got shape {tuple(y.shape)}")

    def target(self) -> Target:
        return labels(2)

    def log_prior(self, theta: Tensor) -> Tensor:
        # Beta density at p = σ(θ) times the Jacobian dp/dθ = p(1 − p).
        t = theta[:, 0]
        return (
            self.alpha * F.logsigmoid(t)
            + self.beta * F.logsigmoid(-t)
            - float(log_beta(self.alpha, self.beta))
        )

    def grad_log_prior(self, theta: Tensor) -> Tensor:
        return self.alpha - (self.alpha + self.beta) * torch.sigmoid(theta)

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        assert y is not None
        return y * F.logsigmoid(theta) + (1.0 - y) * F.logsigmoid(-theta)

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> Tensor:
        assert y is not None
        return row_weight * (y.sum() - y.shape[0] * torch.sigmoid(theta))

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        # p = G₁/(G₁ + G₂) with G₁ ~ Gamma(α), G₂ ~ Gamma(β), so logit p = log G₁ − log G₂.
        log_g1 = sample_log_gamma(self.alpha, num, generator)
        log_g2 = sample_log_gamma(self.beta, num, generator)
        return (log_g1 - log_g2)[:, None]

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        """Probabilities (R, 2) of y = 0 and y = 1; one row when ``x`` is None."""
        rows = 1 if x is None else x.shape[0]
        p1 = (normalized_weights(log_weights) * torch.sigmoid(theta[:, 0])).sum()
        return Prediction(probabilities=torch.stack([1.0 - p1, p1]).expand(rows, 2))

    # --- conjugate oracle -------------------------------------------------------------------

    def closed_form(self) -> ConjugateModel:
        return self

    def prior_stats(self) -> dict[str, Tensor]:
        return {
            "alpha": torch.tensor(self.alpha, dtype=torch.float64),
            "beta": torch.tensor(self.beta, dtype=torch.float64),
        }

    def predict_from_stats(self, stats: dict[str, Tensor], x: Tensor | None) -> Prediction:
        """P(y* = 1) = α / (α + β), one row when ``x`` is None."""
        rows = 1 if x is None else x.shape[0]
        p1 = stats["alpha"] / (stats["alpha"] + stats["beta"])
        return Prediction(probabilities=torch.stack([1.0 - p1, p1]).expand(rows, 2))

    def posterior_moments(self, stats: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """logit p = log G₁ − log G₂ with independent G₁ ~ Gamma(α), G₂ ~ Gamma(β)."""
        a, b = stats["alpha"], stats["beta"]
        mean = torch.digamma(a) - torch.digamma(b)
        var = torch.special.polygamma(1, a) + torch.special.polygamma(1, b)
        return mean[None], var[None]

    def update_stats(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> dict[str, Tensor]:
        assert y is not None
        ones = y.sum()
        return {"alpha": stats["alpha"] + ones, "beta": stats["beta"] + (y.shape[0] - ones)}

    def log_predictive(
        self, stats: dict[str, Tensor], x: Tensor | None, y: Tensor | None
    ) -> Tensor:
        """Chain rule over the chunk's rows: p(y_r = 1 | before r) = α_r / (α_r + β_r)."""
        assert y is not None
        ones_before = torch.cumsum(y, 0) - y
        rows_before = torch.arange(y.shape[0], dtype=y.dtype, device=y.device)
        a = stats["alpha"] + ones_before
        b = stats["beta"] + (rows_before - ones_before)
        return (y * torch.log(a) + (1.0 - y) * torch.log(b) - torch.log(a + b)).sum()

    def batch_log_evidence(self, x: Tensor | None, y: Tensor | None) -> Tensor:
        """log p(y) = log B(α + k, β + n − k) − log B(α, β)."""
        assert y is not None
        ones = y.sum()
        return log_beta(self.alpha + ones, self.beta + (y.shape[0] - ones)) - log_beta(
            self.alpha, self.beta
        )
