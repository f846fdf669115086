"""Full-batch Hamiltonian Monte Carlo with a Metropolis correction (Neal 2011, sec. 5.3.3).

The inverse mass matrix is the particle covariance, so the leapfrog step ``step_scale`` is in
units of the target's own scale. Exact (π-invariant) whatever the step,
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
    """One HMC transition per particle; returns new positions and the mean acceptance rate.

    ``scale`` is L with M⁻¹ = L Lᵀ. In whitened momentum q = Lᵀp ~ N(0, I) the leapfrog reads
    q ← q + ε/2 Lᵀ∇log π, θ ← θ + ε L q, and the kinetic energy is |q|²/2.
    """
    m = theta.shape[0]
    # Jitter the step per particle (uniform ±50%) to avoid periodic orbits (Neal 2011, sec. 5.4.2).
    eps = step_scale * (0.5 + torch.rand(m, 1, generator=generator, dtype=theta.dtype))
    q0 = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
    log_p0, grad = log_target(theta)
    position, q = theta, q0 + 0.5 * eps * (grad @ scale)
    for i in range(leapfrog_steps):
        position = position + eps * (q @ scale.T)
        log_p, grad = log_target(position)
        q = q + (0.5 if i == leapfrog_steps - 1 else 1.0) * eps * (grad @ scale)
    log_accept = (log_p - 0.5 * (q * q).sum(-1)) - (log_p0 - 0.5 * (q0 * q0).sum(-1))
    log_accept = torch.nan_to_num(log_accept, nan=-torch.inf)
    accept = torch.log(torch.rand(m, generator=generator, dtype=theta.dtype)) < log_accept
    return torch.where(accept[:, None], position, theta), float(accept.to(theta.dtype).mean())
