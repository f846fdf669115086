"""Full-batch Hamiltonian Monte Carlo with a Metropolis correction (Neal 2011, sec. 5.3.3).

The inverse mass matrix is the particle covariance, so the leapfrog step ``step_scale`` is in
units of the target's own scale. Exact (π-invariant) whatever the step,
which is why it is used while the past data is small enough to evaluate in full.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.moves.metric import to_position, whitened

LogTargetFn = Callable[[Tensor], tuple[Tensor, Tensor]]  # θ -> (log π(θ) (M,), ∇ log π (M, D))


class HMCParams(NamedTuple):
    step_scale: float  # leapfrog step in units of the particle spread (jittered ±50%)
    leapfrog_steps: int
    transitions: int  # HMC transitions (fresh momentum each) per move


class Transition(NamedTuple):
    position: Tensor  # (M, D)
    acceptance: float  # mean Metropolis acceptance
    log_target: Tensor  # (M,) log π at ``position``
    grad: Tensor  # (M, D) ∇ log π at ``position``


def hmc_chain(
    theta: Tensor,
    log_target: LogTargetFn,
    scale: Tensor,
    params: HMCParams,
    generator: torch.Generator,
    grad_log_target: Callable[[Tensor], Tensor] | None = None,
    between: Callable[[], None] | None = None,
) -> tuple[Tensor, tuple[float, ...]]:
    """``params.transitions`` transitions, each starting from log π and ∇ log π where the last
    one ended (they are the same numbers as a fresh evaluation); ``between`` is called between
    transitions. Returns the positions and each transition's mean acceptance."""
    acceptance = []
    start = None
    for index in range(params.transitions):
        if index and between is not None:
            between()
        moved = transition(
            theta,
            log_target,
            scale,
            params.step_scale,
            params.leapfrog_steps,
            generator,
            grad_log_target,
            start,
        )
        theta, start = moved.position, (moved.log_target, moved.grad)
        acceptance.append(moved.acceptance)
    return theta, tuple(acceptance)


def transition(
    theta: Tensor,
    log_target: LogTargetFn,
    scale: Tensor,
    step_scale: float,
    leapfrog_steps: int,
    generator: torch.Generator,
    grad_log_target: Callable[[Tensor], Tensor] | None = None,
    start: tuple[Tensor, Tensor] | None = None,
) -> Transition:
    """One HMC transition per particle from ``theta`` (``start``: log π and ∇ log π there, if
    known). ``grad_log_target`` (∇ log π alone, where cheaper) serves the leapfrog steps whose
    log π the Metropolis test does not read.

    ``scale`` is L with M⁻¹ = L Lᵀ. In whitened momentum q = Lᵀp ~ N(0, I) the leapfrog reads
    q ← q + ε/2 Lᵀ∇log π, θ ← θ + ε L q, and the kinetic energy is |q|²/2. The products with L
    compute in its dtype (``metric``): each half of the leapfrog stays a shear, so the chain
    stays exact.
    """
    m = theta.shape[0]
    # Jitter the step per particle (uniform ±50%) to avoid periodic orbits (Neal 2011, sec. 5.4.2).
    eps = step_scale * (
        0.5 + torch.rand(m, 1, generator=generator, dtype=theta.dtype, device=theta.device)
    )
    q0 = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=theta.device)
    log_p0, grad0 = log_target(theta) if start is None else start
    half = 0.5 * eps
    position, q = theta, q0 + half * whitened(grad0, scale)
    for i in range(leapfrog_steps):
        position = position + eps * to_position(q, scale)
        last = i == leapfrog_steps - 1
        if last or grad_log_target is None:
            log_p, grad = log_target(position)
        else:
            grad = grad_log_target(position)
        q = q + (half if last else eps) * whitened(grad, scale)
    log_accept = (log_p - 0.5 * (q * q).sum(-1)) - (log_p0 - 0.5 * (q0 * q0).sum(-1))
    log_accept = torch.nan_to_num(log_accept, nan=-torch.inf)
    accept = (
        torch.log(torch.rand(m, generator=generator, dtype=theta.dtype, device=theta.device))
        < log_accept
    )
    return Transition(
        torch.where(accept[:, None], position, theta),
        float(accept.to(theta.dtype).mean()),
        torch.where(accept, log_p, log_p0),
        torch.where(accept[:, None], grad, grad0),
    )
