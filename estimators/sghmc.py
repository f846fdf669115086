"""Stochastic-gradient HMC moves (Chen, Fox & Guestrin 2014, eq. 15, with β̂ = 0).

    v ← (1 − α) v + η ∇log π(θ) + N(0, 2αη),    θ ← θ + v,    v₀ ~ N(0, η)

η may be a per-coordinate vector: that is SGHMC with a diagonal mass matrix M, η = h²M⁻¹.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

GradFn = Callable[[Tensor], Tensor]


def sghmc_move(
    theta: Tensor,
    grad_log_target: GradFn,
    step_size: Tensor,
    friction: float,
    steps: int,
    generator: torch.Generator,
) -> Tensor:
    """``steps`` SGHMC steps from ``theta`` (M, D) with a fresh momentum; returns new positions."""
    noise_scale = torch.sqrt(2.0 * friction * step_size)
    velocity = torch.sqrt(step_size) * torch.randn(
        theta.shape, generator=generator, dtype=theta.dtype
    )
    for _ in range(steps):
        noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
        velocity = (1.0 - friction) * velocity + step_size * grad_log_target(theta) \
            + noise_scale * noise
        theta = theta + velocity
    return theta
