"""Stochastic-gradient HMC moves (Chen, Fox & Guestrin 2014, eq. 15, with β̂ = 0).

    v ← (1 − α) v + η M⁻¹∇log π(θ) + N(0, 2αη M⁻¹),    θ ← θ + v,    v₀ ~ N(0, η M⁻¹)

With a mass matrix M the step is η M⁻¹ (Ma, Chen & Fox 2015, constant preconditioner).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

GradFn = Callable[[Tensor], Tensor]


def sghmc_move(
    theta: Tensor,
    grad_log_target: GradFn,
    step: float,
    scale: Tensor,
    friction: float,
    steps: int,
    generator: torch.Generator,
) -> Tensor:
    """``steps`` SGHMC steps from ``theta`` (M, D) with a fresh momentum; returns new positions.

    ``scale`` is L with M⁻¹ = L Lᵀ; the drift is η M⁻¹ ∇log π and the noise N(0, 2αη M⁻¹).
    """
    noise_scale = (2.0 * friction * step) ** 0.5
    momentum = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
    velocity = step**0.5 * momentum @ scale.T
    inverse_mass = scale @ scale.T
    for _ in range(steps):
        noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype) @ scale.T
        drift = step * grad_log_target(theta) @ inverse_mass
        velocity = (1.0 - friction) * velocity + drift + noise_scale * noise
        theta = theta + velocity
    return theta
