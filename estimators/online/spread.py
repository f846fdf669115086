"""How wide the particle cloud is, in units of the posterior's own width.

A cloud that has collapsed onto one point gives no sign in its weights or its moves: every
particle explains a new piece as well as the others, so the piece anneals in one step with the
ESS at M, and no move diverges. The sorted mixture's calibration run 22 ended 77,836 nats low
that way (benchmarks/README.md, "Stop 32"). What does show it is the cloud's spread beside the
posterior's. By Bernstein–von Mises the posterior after n rows is near N(θ̂, F⁻¹), F the Fisher
information of the rows, estimated from per-row gradients at one particle on a minibatch of the
rows seen (the empirical Fisher, F̂ = n/b Σ_r g_r g_rᵀ); under it E[(θ − θ̄)ᵀ F (θ − θ̄)] = D.
So the cloud's weighted mean of that quadratic form, over D, is about 1 for a cloud that follows
the posterior and orders of magnitude below 1 for a frozen one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from estimators.data.history import History
from estimators.data.rng import derive_generator
from models import Model

# a cloud whose spread is below this (its standard deviation 100 times the posterior's) is frozen
FROZEN = 1e-4
ROWS = 256  # rows of the empirical Fisher information's minibatch


def relative_spread(
    model: Model,
    particles: Tensor,
    log_weights: Tensor,
    seen: History,
    generator: torch.Generator,
) -> float:
    """E_w[(θ − θ̄)ᵀ F̂ (θ − θ̄)] / D over the cloud, F̂ the empirical Fisher information of the
    rows ``seen`` at the heaviest particle. Its minibatch comes from a generator derived from
    ``generator``'s seed, so the draws the update makes with ``generator`` do not change."""
    weights = log_weights.exp()
    centred = particles - weights @ particles
    sample = seen.sample(ROWS, derive_generator("spread", generator.initial_seed(),
                                                device=generator.device))
    at = particles[int(log_weights.argmax())]
    gradients = model.row_grad_log_likelihood(at[None], sample.x, sample.y)[0]  # (b, D)
    quadratic = len(seen) / ROWS * (weights @ (centred @ gradients.T).square()).sum()
    return float(quadratic) / particles.shape[1]


def frozen(
    model: Model,
    particles: Tensor,
    log_weights: Tensor,
    seen: History,
    generator: torch.Generator,
) -> bool:
    """Whether the cloud is far narrower than the posterior it should follow (``FROZEN``)."""
    return relative_spread(model, particles, log_weights, seen, generator) < FROZEN
