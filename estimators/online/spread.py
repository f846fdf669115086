"""How wide the particle cloud is, in units of the posterior's own width.

A cloud that has collapsed onto one point gives no sign in its weights or its moves: every
particle explains a new piece as well as the others, so the piece anneals in one step with the
ESS at M, and no move diverges. The sorted mixture's calibration run 22 ended 77,836 nats low
that way (benchmarks/README.md, "Stop 32"). What does show it is the cloud's spread beside the
posterior's. By Laplace's approximation the posterior after n rows is near N(θ̂, H⁻¹), H the
negative Hessian of the log posterior; under it E[(θ − θ̄)ᵀ H (θ − θ̄)] = D. So the cloud's
weighted mean of that quadratic form, over D, is about 1 for a cloud that follows the posterior
and orders of magnitude below 1 for a frozen one. H is taken at the heaviest particle, its
likelihood part from a minibatch of the rows seen scaled by n/b (D Hessian-vector products,
batched): the posterior's own curvature, so a model whose noise
scale is wrong for the data reads 1 as well (an empirical Fisher information would not).
"""

from __future__ import annotations

import torch
from torch import Tensor

from estimators.data.history import History
from estimators.data.rng import derive_generator
from models import Model

# a cloud whose spread is below this (its standard deviation a hundredth of the posterior's)
# is frozen
FROZEN = 1e-4
ROWS = 256  # rows of the minibatch the likelihood's curvature is read on


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
    at = particles[int(log_weights.argmax())].detach().requires_grad_(True)
    with torch.enable_grad():
        one = at[None]
        log_posterior = scale * model.log_likelihood(one, sample.x, sample.y).sum() + (
            model.log_prior(one).sum()
        )
        (slope,) = torch.autograd.grad(log_posterior, at, create_graph=True)
        # one Hessian-vector product per coordinate, batched: ∇² log π(θ) (D, D)
        basis = torch.eye(at.shape[0], dtype=at.dtype, device=at.device)
        (hessian,) = torch.autograd.grad(slope, at, basis, is_grads_batched=True)
    quadratic = -torch.einsum("m,md,de,me->", weights, centred, hessian, centred)
    return abs(float(quadratic)) / particles.shape[1]
