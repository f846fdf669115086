"""Settings shared by every estimator that moves particles with SGHMC, and its step size."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from estimators.base import check

PRECONDITIONERS = ("identity", "particles")


@dataclass(frozen=True)
class MoveConfig:
    particles: int = 64
    steps: int = 20  # SGHMC steps (or HMC leapfrog steps) per move
    lr: float = 0.05  # learning rate: η = lr / n (identity) or lr · particle variance
    friction: float = 0.1  # α: momentum decay per step
    batch_size: int = 100  # minibatch size for the past data; full batches below it
    control_variates: bool = True
    preconditioner: str = "particles"
    full_batch_rows: int = 1000  # exact HMC moves (Metropolis-corrected) while n <= this
    # Leapfrog step of those moves in units of the particle spread; 20 × 0.16 (jittered ±50%)
    # spans 1.6-4.8 spreads, a quarter to three quarters of a Gaussian orbit (chosen by measuring
    # log-Z bias on linear regression, benchmarks/README.md).
    hmc_step: float = 0.16
    hmc_moves: int = 2  # HMC transitions (fresh momentum each) per annealing step

    def __post_init__(self) -> None:
        check(self.particles >= 2, "particles must be >= 2")
        check(self.steps >= 1, "steps must be >= 1")
        check(self.lr > 0.0, "lr must be positive")
        check(0.0 < self.friction <= 1.0, "friction must be in (0, 1]")
        check(self.batch_size >= 1, "batch_size must be >= 1")
        check(self.full_batch_rows >= 0, "full_batch_rows must be >= 0")
        check(0.0 < self.hmc_step < 2.0, "hmc_step must be in (0, 2)")
        check(self.hmc_moves >= 1, "hmc_moves must be >= 1")
        check(
            self.preconditioner in PRECONDITIONERS,
            f"preconditioner must be one of {PRECONDITIONERS}, got {self.preconditioner!r}",
        )


def particle_spread(theta: Tensor, log_weights: Tensor) -> Tensor:
    """Weighted standard deviation of the particles per coordinate: (D,)."""
    weights = torch.softmax(log_weights, 0)
    mean = weights @ theta
    variance = weights @ (theta - mean) ** 2
    return variance.clamp_min(torch.finfo(theta.dtype).tiny).sqrt()


def step_size(config: MoveConfig, spread: Tensor, rows: float) -> Tensor:
    """SGHMC step η per coordinate for a target holding ``rows`` (possibly tempered) rows.

    identity: η = lr / n, the O(1/n) step of the SG-AIS literature (n floored at 1: the prior).
    particles: η_j = lr · s_j², the weighted particle variance as a diagonal inverse mass
    matrix; for a posterior with per-row Fisher information F_j this is lr / (n F_j).
    """
    if config.preconditioner == "identity":
        return torch.full_like(spread, config.lr / max(rows, 1.0))
    return config.lr * spread * spread
