"""The mass factor of a tempered step's moves: from the step's weighted cloud alone, or from the
clouds of the steps before it pooled with it (docs/design/moves.md, "Pooled clouds").

M particles estimate a D × D covariance from M − 1 degrees of freedom; at D ≥ M the estimate is
singular before shrinkage and its small eigenvalues feed back on the cloud (``covariance``).
Successive steps' clouds are draws from nearly the same target once the posterior has settled,
so an exponentially weighted average of their covariances, P ← (1 − ρ) P + ρ S, estimates it
from more of them. With the clouds' own degrees of freedom s_j and weights w_j (Σ w_j = 1), the
pooled estimate has the variance of one from 1 / Σ_j w_j² / s_j degrees of freedom (the same
for independent clouds; successive ones are correlated, so this overstates them), and that is
what its shrinkage is told. ρ = 2 / (K + 1) gives the average the mean age and the degrees of
freedom of the last K clouds, K·(M − 1).

A step's moves take the pool as it was before the step's own cloud joins it. A mass estimated
from the particles it moves depends on each of them, most at D > M, where a particle's offset
from the mean lies in the span of the cloud's M − 1 directions and weighs 1/M in their
covariance; SGHMC then no longer leaves the posterior invariant. Started on the posterior
(linear regression, D = 161, M = 64, ``benchmarks/move_width.py``), clouds resampled before each
move (duplicates, as a selection leaves them) narrowed to 0.92 of its width with the step's
cloud in the mass, and to 0.99 with the earlier clouds alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.smc.covariance import (
    covariance_factor,
    particle_scale,
    weighted_covariance,
)


class MassPool(NamedTuple):
    """The pooled covariance carried from step to step (and, stored, from chunk to chunk).
    Empty: nothing pooled yet."""

    # a stored state writes the pool only once it holds something (``data.serialization``), so
    # the states of streams that never pool are stored as they were before the pool existed
    written_when_empty = False

    covariance: Tensor = torch.zeros((0, 0), dtype=torch.float64)  # (D, D) Σ_j w_j S_j
    inverse_samples: Tensor = torch.zeros((), dtype=torch.float64)  # () Σ_j w_j² / s_j

    @property
    def empty(self) -> bool:
        return self.covariance.numel() == 0


NO_POOL = MassPool()

# (θ (M, D), normalised log-weights (M,), pool) -> (the mass factor L (D, D), the pool after)
MassRule = Callable[[Tensor, Tensor, MassPool], tuple[Tensor, MassPool]]


def particle_mass(theta: Tensor, log_weights: Tensor, pool: MassPool) -> tuple[Tensor, MassPool]:
    """The step's own cloud (``covariance.particle_scale``); the pool passes through."""
    return particle_scale(theta, log_weights), pool


def pooled_mass(clouds: int) -> MassRule:
    """The pool of the earlier steps' clouds, then the step's own averaged into it at rate
    ρ = 2 / (``clouds`` + 1); the step's own cloud while the pool is empty."""
    rate = 2.0 / (clouds + 1)

    def rule(theta: Tensor, log_weights: Tensor, pool: MassPool) -> tuple[Tensor, MassPool]:
        covariance = weighted_covariance(theta, log_weights)
        samples = theta.shape[0] - 1
        if pool.empty or pool.covariance.shape != covariance.shape:
            pooled = MassPool(covariance, covariance.new_tensor(1.0 / samples))
            return covariance_factor(covariance, samples), pooled
        factor = covariance_factor(pool.covariance, round(1.0 / float(pool.inverse_samples)))
        return factor, MassPool(
            (1.0 - rate) * pool.covariance + rate * covariance,
            (1.0 - rate) ** 2 * pool.inverse_samples + rate**2 / samples,
        )

    return rule


def mass_rule(clouds: int) -> MassRule:
    """The step's own cloud for ``clouds`` = 1 (nothing to carry), else ``pooled_mass``."""
    return particle_mass if clouds == 1 else pooled_mass(clouds)
