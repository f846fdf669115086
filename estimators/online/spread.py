"""How wide the particle cloud is, in units of the posterior's own width.

A cloud that has collapsed onto one point gives no sign in its weights or its moves: every
particle explains a new piece as well as the others, so the piece anneals in one step with the
ESS at M, and no move diverges, while log Z drifts tens of thousands of nats low on a sorted
mixture stream (see docs/design/re-estimates.md). What does show it is the cloud's spread beside the
posterior's. By Laplace's approximation the posterior after n rows is near N(θ̂, H⁻¹), H the
negative Hessian of the log posterior; under it E[(θ − θ̄)ᵀ H (θ − θ̄)] = D. So the cloud's
weighted mean of that quadratic form, over D, is about 1 for a cloud that follows the posterior
and orders of magnitude below 1 for a frozen one. H is taken at the heaviest particle, its
likelihood part from a minibatch of the rows seen scaled by n/b, in two backward passes over
the M particles: the posterior's own curvature, so a model whose noise scale is wrong for the
data reads 1 as well (an empirical Fisher information would not).
"""

from __future__ import annotations

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.models import Model

# a cloud whose spread is below this (its standard deviation a hundredth of the posterior's)
# is frozen
FROZEN = 1e-4
# a cloud whose spread is above this (its standard deviation twice the posterior's) is wide: it
# no longer follows the posterior. Healthy streams read 0.77-1.31 (docs/design/re-estimates.md)
WIDE = 4.0
ROWS = 256  # rows of the minibatch the likelihood's curvature is read on
# Where nothing decides on it (re-estimates off), an update measures it only when its rows cross
# a multiple of this: about 2 ms per measurement, against 15-30 ms per 500-row update of the
# cheapest models here, so at most a few percent
SPREAD_ROWS = 2000


def relative_spread(
    model: Model,
    particles: Tensor,
    log_weights: Tensor,
    seen: History,
    generator: torch.Generator,
) -> float:
    """|E_w[(θ − θ̄)ᵀ Ĥ (θ − θ̄)]| / D over the cloud, Ĥ the negative Hessian of the log
    posterior of the rows ``seen`` at the heaviest particle (its magnitude: where the log
    posterior is not concave there, a cloud that is wide still reads wide). The minibatch comes
    from a generator derived from ``generator``'s seed, so the draws the update makes with
    ``generator`` do not change."""
    weights = log_weights.exp()
    centred = particles - weights @ particles
    sample = seen.sample(ROWS, derive_generator("spread", generator.initial_seed(),
                                                device=generator.device))
    scale = len(seen) / ROWS
    at = particles[int(log_weights.argmax())]
    # Σ_j w_j d_jᵀ H d_j in two backward passes: particle j's log posterior at θ* + e_j d_j,
    # summed with weights w_j, has a Hessian in e that is diagonal, with w_j d_jᵀ H d_j there
    along = torch.zeros_like(weights, requires_grad=True)
    with torch.enable_grad():
        theta = at + along[:, None] * centred
        log_posterior = scale * model.log_likelihood(theta, sample.x, sample.y).sum(-1) + (
            model.log_prior(theta)
        )
        (slope,) = torch.autograd.grad(weights @ log_posterior, along, create_graph=True)
        (curvature,) = torch.autograd.grad(slope.sum(), along)
    quadratic = -curvature.sum()
    return abs(float(quadratic)) / particles.shape[1]
