"""Full-data annealed importance sampling (AIS/SMC sampler) from the prior to the posterior.

Targets π_λ(θ) ∝ p(θ) p(y_1..N | θ)^λ with 0 = λ_0 < … < λ_T = 1 chosen by conditional-ESS
bisection; log Z = Σ_t log Σ_i W_i p(y | θ_i)^(λ_t − λ_{t−1}) (Del Moral et al. 2006, eq. 14).
Particles are resampled (systematic) when their ESS falls below a threshold and moved by
Metropolis-corrected HMC on the full data with the particle covariance as inverse mass matrix —
the exact phase of SG-AIS applied to all N rows at once. The standard error is SG-AIS's: the
square root of the summed per-step delta-method variances (README, "The standard error").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from estimators.annealing import next_increment
from estimators.base import EstimatorError, check_int, check_number
from estimators.batch import (
    BatchEstimator,
    BatchEvidence,
    checked,
    full_log_likelihood,
    full_log_likelihood_and_grad,
)
from estimators.history import Rows
from estimators.hmc import hmc_move
from estimators.moves import particle_scale
from estimators.resampling import systematic
from estimators.weights import ess as kish_ess
from estimators.weights import log_mean_increment, log_normalize
from models import Model


@dataclass(frozen=True)
class AISConfig:
    particles: int = 64
    ess_target: float = 0.8  # conditional-ESS fraction each annealing step keeps
    resample_threshold: float = 0.5  # resample when ESS / M falls below this
    hmc_step: float = 0.16  # leapfrog step in units of the particle spread (jittered ±50%)
    # 8 moves of 10 leapfrog steps, as SG-AIS's exact phase (estimators/moves.py): 4 of 20 read
    # low on linear regression at N = 1e4 (−1.21 ± 0.41 nats, benchmarks/README.md).
    leapfrog_steps: int = 10  # leapfrog steps per HMC move
    hmc_moves: int = 8  # HMC transitions (fresh momentum each) per temperature
    max_steps: int = 10000  # annealing steps; a safeguard (more raises EstimatorError)

    def __post_init__(self) -> None:
        check_int("particles", self.particles, 2)
        check_number("ess_target", self.ess_target, 0.0, 1.0 - 1e-9)
        check_number("resample_threshold", self.resample_threshold, 0.0, 1.0, closed_below=True)
        check_number("hmc_step", self.hmc_step, 0.0, 2.0)
        check_int("leapfrog_steps", self.leapfrog_steps, 1)
        check_int("hmc_moves", self.hmc_moves, 1)
        check_int("max_steps", self.max_steps, 1)


def run_ais(
    model: Model, rows: Rows, config: AISConfig, generator: torch.Generator
) -> BatchEvidence:
    """log p(rows) by AIS from the prior, with its standard error and weighted particles."""
    m = config.particles
    theta = model.sample_prior(m, generator)
    log_w = torch.full((m,), -math.log(m), dtype=torch.float64)
    log_lik = checked(full_log_likelihood(model, theta, rows))
    evaluations = m
    temperature, steps, log_evidence, variance = 0.0, 0, 0.0, 0.0
    acceptance: list[float] = []
    while temperature < 1.0:
        if steps >= config.max_steps:
            raise EstimatorError(
                f"AIS reached only λ = {temperature:.3g} in {steps} annealing steps"
            )
        remaining = 1.0 - temperature
        increments = torch.nan_to_num(log_lik, nan=-math.inf)
        delta = next_increment(log_w, increments, remaining, config.ess_target)
        if delta < 1e-12 * remaining:
            raise EstimatorError(f"AIS annealing stalled at λ = {temperature:.3g}")
        step_log_evidence, step_variance = log_mean_increment(log_w, delta * increments)
        log_evidence += step_log_evidence
        variance += step_variance
        log_w = log_normalize(log_w + delta * increments)
        temperature = 1.0 if delta >= remaining else temperature + delta
        steps += 1
        scale = particle_scale(theta, log_w)  # before resampling: W carries the target
        if kish_ess(log_w) < config.resample_threshold * m:
            theta = theta[systematic(torch.exp(log_w), generator)]
            log_w = torch.full_like(log_w, -math.log(m))
        theta, log_lik, rate = _move(model, rows, theta, temperature, scale, config, generator)
        evaluations += m * (config.hmc_moves * (config.leapfrog_steps + 1) + 1)
        acceptance.append(rate)
    return BatchEvidence(
        log_evidence=log_evidence,
        log_evidence_stderr=math.sqrt(variance),
        iterations=steps,
        likelihood_evaluations=evaluations,
        particles=theta,
        log_weights=log_w,
        acceptance_rate=sum(acceptance) / len(acceptance),
    )


def _move(
    model: Model,
    rows: Rows,
    theta: Tensor,
    temperature: float,
    scale: Tensor,
    config: AISConfig,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, float]:
    """``hmc_moves`` HMC transitions on π_λ; returns the particles, their full-data
    log-likelihoods and the mean acceptance rate."""

    def log_target(position: Tensor) -> tuple[Tensor, Tensor]:
        value, grad = full_log_likelihood_and_grad(model, position, rows, temperature)
        return value + model.log_prior(position), grad + model.grad_log_prior(position)

    rates = []
    for _ in range(config.hmc_moves):
        theta, rate = hmc_move(
            theta, log_target, scale, config.hmc_step, config.leapfrog_steps, generator
        )
        rates.append(rate)
    # One more pass for the untempered log-likelihood the next bisection needs.
    return theta, checked(full_log_likelihood(model, theta, rows)), sum(rates) / len(rates)


class AIS(BatchEstimator):
    """AIS as an ``Estimator``: every update re-runs ``run_ais`` on history + chunk."""

    def __init__(self, model: Model, config: AISConfig) -> None:
        super().__init__(model, config, run_ais, config.particles)
