"""Models that break the contract in one way each, for the conformance checks' tests: all are
linear regressions (closed form, so the evidence check has an exact answer) with one method
wrong."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from modelcompare.models import LinearRegression, Prediction
from modelcompare.models.weighting import normalized_weights


class WidePrior(LinearRegression):
    """Draws θ ~ N(0, (2τ)²) while log_prior is the density of N(0, τ²)."""

    def sample_prior(self, num: int, generator: torch.Generator) -> Tensor:
        return 2.0 * super().sample_prior(num, generator)


class UnnormalisedPrior(LinearRegression):
    """log_prior without its constant −D (log τ + ½ log 2π)."""

    def log_prior(self, theta: Tensor) -> Tensor:
        return -0.5 * (theta**2).sum(-1) / self.prior_std**2


MISSING_CONSTANT = 0.5 * math.log(2 * math.pi)  # per coordinate, at τ = 1


class WrongGradient(LinearRegression):
    """The likelihood's gradient with the bias component's sign flipped (as if the residual
    were μ − y there)."""

    def grad_log_likelihood(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> Tensor:
        return self.log_likelihood_and_grad(theta, x, y, row_weight)[1]

    def log_likelihood_and_grad(
        self, theta: Tensor, x: Tensor | None, y: Tensor | None, row_weight: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        value, grad = super().log_likelihood_and_grad(theta, x, y, row_weight)
        return value, torch.cat([grad[:, :-1], -grad[:, -1:]], dim=1)


class WrongPredictShape(LinearRegression):
    """predict that forgets to average over the particles: (M, R) means."""

    def predict(self, theta: Tensor, log_weights: Tensor, x: Tensor | None) -> Prediction:
        assert x is not None
        means = theta[:, :-1] @ x.T + theta[:, -1:]
        weights = normalized_weights(log_weights)[:, None]
        return Prediction(mean=means, variance=(weights * means**2).sum(0) + self.noise_std**2)


class FailingLikelihood(LinearRegression):
    """log_likelihood raises."""

    def log_likelihood(self, theta: Tensor, x: Tensor | None, y: Tensor | None) -> Tensor:
        raise RuntimeError("the likelihood is not written yet")
