"""Put every particle of a label-symmetric posterior in the same labelling (one mode of K!).

A mixture's prior and likelihood are unchanged by reordering its components (``Model.relabelings``),
so its posterior has K! copies of every mode. Particles spread over several copies give a particle
covariance that spans the copies, and moves preconditioned by it take steps far larger than any
one mode (SGHMC then diverges). Mapping each particle to its relabelling nearest a common
reference loses nothing: for a symmetric π the image of π under that map is K!·π restricted to the
reference's chamber, whose ratios of normalising constants, and so every evidence increment
E_π[p(chunk | θ)^Δλ], are those of π, the likelihood being symmetric too (Stephens 2000,
"Dealing with label switching in mixture models", sec. 4, with squared distance as the loss).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from modelcompare.models import Model

Relabel = Callable[[Tensor, Tensor], Tensor]  # (θ (M, D), log-weights (M,)) -> θ relabelled

ROUNDS = 3  # reference ← weighted mean of the aligned cloud, realign; settles in 2-3 rounds


def is_label_symmetric(model: Model) -> bool:
    return model.relabelings(torch.zeros(1, model.param_dim, dtype=torch.float64)).shape[0] > 1


def relabeler(model: Model) -> Relabel | None:
    """``align_labels`` for a label-symmetric model, None for the others (decided once)."""
    return functools.partial(align_labels, model) if is_label_symmetric(model) else None


def align_labels(model: Model, theta: Tensor, log_weights: Tensor) -> Tensor:
    """Each particle (M, D) replaced by its relabelling nearest a common reference, which starts at
    the heaviest particle and becomes the weighted mean of the aligned particles."""
    candidates = model.relabelings(theta)  # (G, M, D), the identity first
    weights = torch.softmax(log_weights, 0)
    reference = theta[int(torch.argmax(weights))]
    particles = torch.arange(theta.shape[0], device=theta.device)
    for _ in range(ROUNDS):
        nearest = (candidates - reference).square().sum(-1).argmin(0)  # (M,)
        aligned = candidates[nearest, particles]
        reference = weights @ aligned
    return aligned
