"""Stochastic-gradient HMC moves (Chen, Fox & Guestrin 2014, eq. 15), in whitened velocity u:

    u ← (I − αI − B̂) u + η Lᵀ∇̂log π(θ) + N(0, 2αη I),    θ ← θ + L u,    u₀ ~ N(0, η I)

with M⁻¹ = L Lᵀ a constant preconditioner (Ma, Chen & Fox 2015). The minibatch gradient ∇̂ of
covariance V adds η² LᵀVL of noise per step on top of the injected 2αη I; B̂ = η LᵀVL / 2 is the
matching friction, so dissipation again balances the total noise and the moves sample π rather
than a law hotter along the noisiest directions. Eq. 15 subtracts B̂ from the injected noise
instead, which is impossible where B̂ exceeds αI (measured 2–3× on softmax regression,
benchmarks/sgais_noise.py); raising the friction needs no such room. B̂ = 0 is plain SGHMC.
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
    gradient_noise: Tensor | None = None,
) -> Tensor:
    """``steps`` SGHMC steps from ``theta`` (M, D) with a fresh momentum; returns new positions.

    ``scale`` is L with M⁻¹ = L Lᵀ. ``gradient_noise`` is a factor G (M, R, D) of each
    particle's gradient-noise covariance, V_m = G_mᵀ G_m (``gradients.gradient_noise``); without
    it the noise is taken as zero.
    """
    noise_scale = (2.0 * friction * step) ** 0.5
    velocity = step**0.5 * torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
    extra_friction = None
    if gradient_noise is not None:
        extra_friction = _extra_friction(gradient_noise, step, scale, 1.0 - friction)
    for _ in range(steps):
        damped = (1.0 - friction) * velocity
        if extra_friction is not None:
            damped = damped - extra_friction(velocity)
        noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
        velocity = damped + step * grad_log_target(theta) @ scale + noise_scale * noise
        theta = theta + velocity @ scale.T
    return theta


def _extra_friction(
    gradient_noise: Tensor, step: float, scale: Tensor, ceiling: float
) -> Callable[[Tensor], Tensor]:
    """u ↦ B̂u per particle, B̂ = η LᵀVL / 2 = UᵀU, shrunk per particle so B̂ ≤ ``ceiling``·I.

    The ceiling keeps the total friction at most 1 (no velocity sign flips); where it binds the
    noisiest direction of that particle stays hotter than π by the clipped amount. B̂ is kept as
    the smaller of the D × D matrix and its R × D factor U.
    """
    factor = (0.5 * step) ** 0.5 * (gradient_noise @ scale)  # U: (M, R, D)
    rows, dim = factor.shape[1:]
    matrix = factor.transpose(1, 2) @ factor if dim <= rows else None
    # The trace of B̂ bounds its largest eigenvalue.
    bound = factor.square().sum((1, 2)) if matrix is None else matrix.diagonal(0, 1, 2).sum(-1)
    if not bool((bound <= ceiling).all()):
        if matrix is not None:
            largest = torch.linalg.eigvalsh(matrix)[:, -1]
        else:
            largest = torch.linalg.matrix_norm(factor, ord=2).square()
        shrink = torch.clamp(ceiling / largest, max=1.0)
        factor = factor * shrink.sqrt()[:, None, None]
        matrix = None if matrix is None else matrix * shrink[:, None, None]
    if matrix is not None:
        dense = matrix
        return lambda velocity: torch.bmm(velocity[:, None, :], dense)[:, 0]
    return lambda velocity: torch.bmm(
        torch.bmm(velocity[:, None, :], factor.transpose(1, 2)), factor
    )[:, 0]
