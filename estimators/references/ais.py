"""Full-data annealed importance sampling (AIS/SMC sampler) from the prior to the posterior.

Targets π_λ(θ) ∝ p(θ) p(y_1..N | θ)^λ with 0 = λ_0 < … < λ_T = 1 chosen by conditional-ESS
bisection; log Z = Σ_t log Σ_i W_i p(y | θ_i)^(λ_t − λ_{t−1}) (Del Moral et al. 2006, eq. 14).
Particles are resampled (systematic) when their ESS falls below a threshold and moved by
Metropolis-corrected HMC on the full data with the particle covariance as inverse mass matrix:
the tempered-SMC step of SG-AIS (``smc.tempered``) with the whole data set as the one piece and
the prior as the starting cloud. The standard error is SG-AIS's: the square root of the summed
per-step delta-method variances (docs/design/standard-error.md).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import Tensor

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.deadline import Checkpoint, Deadline
from modelcompare.estimators.estimator import Estimator
from modelcompare.estimators.moves.hmc import HMCParams, hmc_chain
from modelcompare.estimators.references.batch import (
    BatchEvidence,
    BatchState,
    Rerun,
    RerunInfo,
    full_log_likelihood,
    full_log_likelihood_and_grad,
    rerun_estimator,
)
from modelcompare.estimators.settings import (
    Advanced,
    HMCSettings,
    LadderSettings,
    ParticleSettings,
)
from modelcompare.estimators.smc.resampling import resample_below, systematic
from modelcompare.estimators.smc.temperature import adaptive
from modelcompare.estimators.smc.tempered import (
    Move,
    Moved,
    TemperedSMC,
    anneal,
    start,
)
from modelcompare.models import Model


class AISSettings(LadderSettings, HMCSettings, ParticleSettings):
    """``ais``: annealed importance sampling from the prior on all rows, re-run per update."""

    max_steps: Advanced[int] = Field(
        10_000,
        ge=1,
        le=100_000,
        description="annealing steps per run; more raise EstimatorError (a safeguard)",
    )


def full_data_hmc(model: Model, rows: Rows, params: HMCParams) -> Move:
    """``params.transitions`` HMC transitions on π_λ over every row (blocked passes)."""

    def move(
        theta: Tensor,
        temperature: float,
        scale: Tensor,
        generator: torch.Generator,
        checkpoint: Checkpoint,
    ) -> Moved:
        def log_target(position: Tensor) -> tuple[Tensor, Tensor]:
            value, grad = full_log_likelihood_and_grad(model, position, rows, temperature)
            return value + model.log_prior(position), grad + model.grad_log_prior(position)

        theta, acceptance = hmc_chain(theta, log_target, scale, params, generator, None, checkpoint)
        return Moved(theta, acceptance)

    return move


def run_ais(
    model: Model,
    rows: Rows,
    settings: AISSettings,
    generator: torch.Generator,
    deadline: Deadline | None = None,
) -> BatchEvidence:
    """log p(rows) by AIS from the prior, with its standard error and weighted particles."""
    m = settings.particles
    theta = model.sample_prior(m, generator)
    log_w = torch.full((m,), -math.log(m), dtype=torch.float64, device=theta.device)
    smc = TemperedSMC(
        log_likelihood=lambda position: full_log_likelihood(model, position, rows),
        temperature_rule=adaptive(settings.ess_target),
        selection=resample_below(settings.resample_threshold, systematic),
        move=full_data_hmc(model, rows, settings.hmc),
    )
    final, steps = anneal(smc, start(smc, theta, log_w), generator, settings.max_steps, deadline)
    per_step = [sum(info.acceptance) / len(info.acceptance) for info in steps]
    per_move = settings.hmc_moves * (settings.leapfrog_steps + 1) + 1
    return BatchEvidence(
        log_evidence=sum(info.log_evidence_increment for info in steps),
        log_evidence_stderr=math.sqrt(sum(info.log_evidence_increment_variance for info in steps)),
        iterations=len(steps),
        likelihood_evaluations=m + len(steps) * m * per_move,
        particles=final.particles,
        log_weights=final.log_weights,
        acceptance_rate=sum(per_step) / len(per_step),
    )


def bind(model: Model, settings: AISSettings) -> Estimator[BatchState, RerunInfo]:
    return rerun_estimator("ais", Rerun(model, settings, run_ais, settings.particles))
