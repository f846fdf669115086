"""Posterior expectations of the functionals users ask about: parameter means, second moments
and the predictive at query rows, from weighted particles or from a conjugate posterior in
closed form.

Parameters are the model's unconstrained θ (e.g. logit p, log λ, log σ²), as the particles hold
them. The predictive functional is the field of ``Prediction`` that is linear in the posterior:
the predictive mean (regression, counts), class probabilities flattened row-major (R·K), or the
predictive density exp(log_density) (density models).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from models import (
    BetaBernoulli,
    ConjugateModel,
    GammaPoisson,
    LinearRegression,
    LinearRegressionUnknownNoise,
    Model,
    Prediction,
)

FUNCTIONALS = ("mean", "second_moment", "predictive")


@dataclass(frozen=True)
class Functional:
    """``kind`` in ``FUNCTIONALS``; ``x`` is the model's view of the query rows (predictive)."""

    kind: str
    x: Tensor | None = None

    def __post_init__(self) -> None:
        if self.kind not in FUNCTIONALS:
            raise ValueError(f"functional must be one of {FUNCTIONALS}, got {self.kind!r}")


def predictive_vector(prediction: Prediction) -> Tensor:
    """The part of a predictive summary that is an expectation over the posterior."""
    if prediction.mean is not None:
        return prediction.mean.reshape(-1)
    if prediction.probabilities is not None:
        return prediction.probabilities.reshape(-1)
    assert prediction.log_density is not None
    return torch.exp(prediction.log_density).reshape(-1)


def particle_expectation(
    model: Model, theta: Tensor, log_weights: Tensor, functional: Functional
) -> Tensor:
    """Σ_i W_i φ(θ_i) over normalised weights W = softmax(log_weights)."""
    if functional.kind == "predictive":
        return predictive_vector(model.predict(theta, log_weights, functional.x))
    weights = torch.softmax(log_weights, 0)
    values = theta if functional.kind == "mean" else theta**2
    return weights @ values


def _log_gamma_moments(shape: Tensor, log_rate: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and variance of log λ for λ ~ Gamma(shape, rate): ψ(a) − log b and ψ'(a)."""
    return torch.digamma(shape) - log_rate, torch.special.polygamma(1, shape)


def _gaussian_moments(stats: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """μ = Λ⁻¹h and diag(Λ⁻¹) of a Gaussian in information form."""
    chol = torch.linalg.cholesky(stats["precision"])
    mean = torch.cholesky_solve(stats["shift"][:, None], chol)[:, 0]
    return mean, torch.diagonal(torch.cholesky_inverse(chol))


def conjugate_moments(model: ConjugateModel, stats: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """Exact posterior mean and variance of each coordinate of θ under the posterior ``stats``."""
    if isinstance(model, LinearRegression):
        return _gaussian_moments(stats)
    if isinstance(model, LinearRegressionUnknownNoise):
        # β | σ² ~ N(μ, σ²Λ⁻¹), σ² ~ InvGamma(a, b): Var β = E[σ²] diag Λ⁻¹ = b/(a−1) diag Λ⁻¹;
        # 1/σ² ~ Gamma(a, b), so log σ² has mean log b − ψ(a) and variance ψ'(a).
        mean, spread = _gaussian_moments(stats)
        a, b = stats["a"], stats["b"]
        noise = b / (a - 1.0) if float(a) > 1.0 else torch.tensor(torch.inf, dtype=b.dtype)
        log_mean, log_var = _log_gamma_moments(a, torch.log(b))
        return torch.cat([mean, -log_mean[None]]), torch.cat([noise * spread, log_var[None]])
    if isinstance(model, BetaBernoulli):
        # logit p = log G₁ − log G₂ with independent G₁ ~ Gamma(α), G₂ ~ Gamma(β).
        a, b = stats["alpha"], stats["beta"]
        mean = torch.digamma(a) - torch.digamma(b)
        var = torch.special.polygamma(1, a) + torch.special.polygamma(1, b)
        return mean[None], var[None]
    if isinstance(model, GammaPoisson):
        mean, var = _log_gamma_moments(stats["shape"], torch.log(stats["rate"]))
        return mean[None], var[None]
    raise TypeError(f"no closed-form posterior moments for {type(model).__name__}")


def conjugate_expectation(
    model: ConjugateModel, stats: dict[str, Tensor], functional: Functional
) -> Tensor:
    """E[φ(θ) | data] in closed form under the posterior ``stats``."""
    if functional.kind == "predictive":
        return predictive_vector(model.predict_from_stats(stats, functional.x))
    mean, var = conjugate_moments(model, stats)
    return mean if functional.kind == "mean" else var + mean**2
