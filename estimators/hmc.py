"""Full-batch Hamiltonian Monte Carlo with a Metropolis correction (Neal 2011, sec. 5.3.3).

The mass matrix is diagonal, M⁻¹ = diag(s²) with s the particle cloud's spread, so the leapfrog
step ``step_scale`` is in units of the target's own scale. Exact (π-invariant) whatever the step,
which is why it is used while the past data is small enough to evaluate in full.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

LogTargetFn = Callable[[Tensor], tuple[Tensor, Tensor]]  # θ -> (log π(θ) (M,), ∇ log π (M, D))


def hmc_move(
    theta: Tensor,
    log_target: LogTargetFn,
    scale: Tensor,
    step_scale: float,
    leapfrog_steps: int,
    generator: torch.Generator,
) -> tuple[Tensor, float]:
    """One HMC transition per particle; returns new positions and the mean acceptance rate."""
    m = theta.shape[0]
    # Jitter the step per particle (uniform ±50%) to avoid periodic orbits (Neal 2011, sec. 5.4.2).
    eps = step_scale * (0.5 + torch.rand(m, 1, generator=generator, dtype=theta.dtype))
    inverse_mass = scale * scale
    momentum = torch.randn(theta.shape, generator=generator, dtype=theta.dtype) / scale
    log_p0, grad = log_target(theta)
    kinetic0 = 0.5 * (momentum * momentum * inverse_mass).sum(-1)
    position, p = theta, momentum + 0.5 * eps * grad
    for i in range(leapfrog_steps):
        position = position + eps * inverse_mass * p
        log_p, grad = log_target(position)
        p = p + (0.5 if i == leapfrog_steps - 1 else 1.0) * eps * grad
    kinetic = 0.5 * (p * p * inverse_mass).sum(-1)
    log_accept = (log_p - kinetic) - (log_p0 - kinetic0)
    log_accept = torch.nan_to_num(log_accept, nan=-torch.inf)
    accept = torch.log(torch.rand(m, generator=generator, dtype=theta.dtype)) < log_accept
    return torch.where(accept[:, None], position, theta), float(accept.to(theta.dtype).mean())
