"""Settings shared by every estimator that moves particles with SGHMC, and its step size."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from estimators.base import EstimatorError, check, check_int, check_number

PRECONDITIONERS = ("identity", "particles")
MH_CORRECTIONS = ("none", "barker")


@dataclass(frozen=True)
class MoveConfig:
    particles: int = 64
    steps: int = 20  # SGHMC steps per move (one move per annealing step)
    lr: float = 0.05  # learning rate: η = lr / n (identity) or lr · particle variance
    friction: float = 0.1  # α: momentum decay per step
    batch_size: int = 100  # minibatch size for the past data; full batches below it
    control_variates: bool = True
    # Re-anchor the control variates at the weighted particle mean once n has grown by this
    # factor: O(1 / (growth − 1)) one-point gradients per new row. The minibatch noise common to
    # all particles is ∝ (particle mean − anchor), and it displaces the whole cloud, which costs
    # log Z at first order; at 1.02 instead of 2 softmax regression's drift from n = 2e4 to 1e5
    # fell from −3.1 / −6.2 to −0.7 / −1.2 nats (2 seeds), at no measurable CPU.
    anchor_growth: float = 1.02
    preconditioner: str = "particles"
    full_batch_rows: int = 500  # exact HMC moves (Metropolis-corrected) while n <= this
    # Leapfrog step of those moves in units of the particle spread (chosen by measuring log-Z
    # bias on linear regression, benchmarks/README.md). 8 moves of 10 steps (0.8-2.4 spreads,
    # jittered ±50%) rather than 4 of 20, the same 80 gradients: at n = 500 the mean log-Z error
    # (6 seeds) went from −1.71 to +0.06 nats on softmax regression, −0.53 to +0.48 on the
    # mixture, −0.27 to −0.12 on linear regression; 16 of 5 overshot (+1.1 on softmax).
    hmc_step: float = 0.16
    leapfrog_steps: int = 10  # leapfrog steps of each exact HMC move
    hmc_moves: int = 8  # HMC transitions (fresh momentum each) per annealing step
    # "barker": each SGHMC trajectory is accepted or rejected by the minibatch Barker test
    # (estimators/corrected_moves.py); "none": plain SGHMC.
    mh_correction: str = "none"
    # Raise SGHMC's friction by its estimated gradient noise (estimators/sghmc.py) so that the
    # moves are not hotter than the target along the noisiest directions.
    noise_friction: bool = True

    def __post_init__(self) -> None:
        check_int("particles", self.particles, 2)
        check_int("steps", self.steps, 1)
        check_number("lr", self.lr, 0.0, math.inf)
        check_number("friction", self.friction, 0.0, 1.0)
        check_int("batch_size", self.batch_size, 1)
        check_int("full_batch_rows", self.full_batch_rows, 0)
        check_number("hmc_step", self.hmc_step, 0.0, 2.0)
        check_int("hmc_moves", self.hmc_moves, 1)
        check_int("leapfrog_steps", self.leapfrog_steps, 1)
        check(isinstance(self.control_variates, bool), "control_variates must be true or false")
        check_number("anchor_growth", self.anchor_growth, 1.0, math.inf)
        check(isinstance(self.noise_friction, bool), "noise_friction must be true or false")
        check(
            self.mh_correction in MH_CORRECTIONS,
            f"mh_correction must be one of {MH_CORRECTIONS}, got {self.mh_correction!r}",
        )
        check(
            self.preconditioner in PRECONDITIONERS,
            f"preconditioner must be one of {PRECONDITIONERS}, got {self.preconditioner!r}",
        )


def particle_scale(theta: Tensor, log_weights: Tensor) -> Tensor:
    """Lower Cholesky factor L of the weighted particle covariance, L Lᵀ = Cov_W(θ): (D, D).

    A full (not diagonal) factor: posteriors with non-identified directions (softmax weights)
    have marginal variances far above their conditional ones, and only the full covariance sees
    that. A relative jitter of 1e-9 keeps the factorisation defined when particles coincide.
    """
    weights = torch.softmax(log_weights, 0)
    centred = theta - weights @ theta
    cov = (centred * weights[:, None]).T @ centred
    jitter = 1e-9 * float(cov.diagonal().mean()) + torch.finfo(theta.dtype).tiny
    eye = torch.eye(theta.shape[1], dtype=theta.dtype)
    factor, info = torch.linalg.cholesky_ex(cov + jitter * eye)
    if int(info) != 0 or not torch.isfinite(factor).all():
        raise EstimatorError(
            "the particle covariance is not positive definite (particles diverged)"
        )
    return factor


def sghmc_step(config: MoveConfig, particle_factor: Tensor, rows: float) -> tuple[float, Tensor]:
    """SGHMC step η and mass factor L (M⁻¹ = L Lᵀ) for a target holding ``rows`` rows.

    identity: η = lr / n and L = I, the O(1/n) step of the SG-AIS literature (n floored at 1,
    the prior's weight). particles: η = lr and L Lᵀ = the particle covariance ≈ (n F)⁻¹ for a
    posterior with per-row Fisher information F, i.e. the same lr / n step in F's metric.
    """
    if config.preconditioner == "identity":
        eye = torch.eye(particle_factor.shape[0], dtype=particle_factor.dtype)
        return config.lr / max(rows, 1.0), eye
    return config.lr, particle_factor
