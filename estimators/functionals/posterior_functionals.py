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

from modelcompare.models import ConjugateModel, Model, Prediction

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


def conjugate_expectation(
    model: ConjugateModel, stats: dict[str, Tensor], functional: Functional
) -> Tensor:
    """E[φ(θ) | data] in closed form under the posterior ``stats``."""
    if functional.kind == "predictive":
        return predictive_vector(model.predict_from_stats(stats, functional.x))
    mean, var = model.posterior_moments(stats)
    return mean if functional.kind == "mean" else var + mean**2
