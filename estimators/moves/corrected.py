"""SGHMC moves with a minibatch Metropolis correction (``mh_correction="barker"``).

SGHMC with friction is not reversible, so its trajectory cannot be accepted or rejected as it
stands. Split each SGHMC step into an exact Ornstein–Uhlenbeck refresh of the momentum (O) and a
symmetric, volume-preserving position–kick–position step (A B A) with a minibatch gradient: a
Langevin trajectory accepted as a whole (Riou-Durand & Vogrinc 2022, "Metropolis Adjusted Langevin
Trajectories", Algorithm 1). In whitened momentum q (θ-velocity √η L q, M⁻¹ = L Lᵀ) one move is

    q₀ ~ N(0, I);  for k = 1..K:  [k > 1: q ← (1 − α) q + √(1 − (1 − α)²) ξ]      (O)
                                  θ ← θ + ½√η L q;  q ← q + √η Lᵀ ĝ_k(θ);  θ ← θ + ½√η L q  (ABA)
    Δ = log π(θ_K) − log π(θ₀) − Σ_k [½|q_k⁺|² − ½|q_k⁻|²],                                (1)

q_k∓ the momentum before / after the k-th ABA step. (1) is the log of the ratio of the
reversed path's probability (momentum flipped) to the forward one: the O steps leave N(0, I)
invariant, so their transition densities cancel except for kinetic terms, and the ABA steps have
unit Jacobian. ĝ_k is the minibatch (control-variate) gradient with its own batch B_k; the
batches are drawn independently of θ, so the reversed sequence B_K..B_1 is as likely as the
forward one and every ABA step is a fixed map given its batch — (1) stays exact with noisy
gradients. The whole trajectory is then accepted by the minibatch Barker test on (1), the
kinetic terms exact and log π(θ_K) − log π(θ₀) estimated from past rows. On rejection θ₀ stays.
The O step's noise is √(1 − (1 − α)²) = √(2α − α²), not SGHMC's √(2α): only then is N(0, I)
exactly invariant.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.moves.barker import BarkerResult
from modelcompare.estimators.moves.minibatch_target import MinibatchTarget, barker_log_ratio_test
from modelcompare.estimators.moves.sghmc import GradFn


class CorrectedMove(NamedTuple):
    position: Tensor  # (M, D) after the test
    test: BarkerResult


def corrected_sghmc_move(
    theta: Tensor,
    target: MinibatchTarget,
    grad_log_target: GradFn,
    step: float,
    scale: Tensor,
    friction: float,
    steps: int,
    batch_size: int,
    generator: torch.Generator,
) -> CorrectedMove:
    """One Metropolis-adjusted SGHMC trajectory of ``steps`` steps from ``theta`` (M, D).

    ``step`` is SGHMC's η and ``scale`` L (M⁻¹ = L Lᵀ), as in ``sghmc_move``; ``batch_size`` is
    the Barker test's first minibatch.
    """
    root_step = step**0.5
    keep = 1.0 - friction
    refresh = (1.0 - keep * keep) ** 0.5
    q = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=theta.device)
    kinetic_change = torch.zeros(theta.shape[0], dtype=theta.dtype, device=theta.device)
    position = theta
    for k in range(steps):
        if k > 0:
            noise = torch.randn(theta.shape, generator=generator, dtype=q.dtype, device=q.device)
            q = keep * q + refresh * noise
        before = 0.5 * (q * q).sum(-1)
        position = position + 0.5 * root_step * (q @ scale.T)
        q = q + root_step * (grad_log_target(position) @ scale)
        position = position + 0.5 * root_step * (q @ scale.T)
        kinetic_change = kinetic_change + 0.5 * (q * q).sum(-1) - before
    test = barker_log_ratio_test(target, theta, position, -kinetic_change, batch_size, generator)
    accepted = test.accept & torch.isfinite(position).all(-1)
    position = torch.where(accepted[:, None], position, theta)
    return CorrectedMove(position, test._replace(accept=accepted))
