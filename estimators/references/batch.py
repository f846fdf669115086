"""What the full-data (batch) reference estimators share: their result record, blocked passes
over all rows, and the ``Estimator`` that re-runs them on the whole history per update.

A batch estimator sees every row at once, so keeping it current on a stream costs a full re-run
per chunk: quadratic in N overall. That is the point of comparing SG-AIS against them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, Rows, cat_rows
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.errors import EstimatorError
from modelcompare.estimators.estimator import Estimator, weighted_particles
from modelcompare.estimators.settings import Settings
from modelcompare.estimators.smc.resampling import systematic
from modelcompare.estimators.smc.weights import ess as kish_ess
from modelcompare.models import Model

# Rows per block of a full-data pass: a (particles, rows) float64 block stays near 32 MiB.
BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class BatchEvidence:
    log_evidence: float
    log_evidence_stderr: float
    iterations: int  # annealing steps (AIS) or nested-sampling iterations (dead points)
    likelihood_evaluations: int  # full-data likelihood or gradient evaluations, per particle
    particles: Tensor  # (M, D) posterior samples, unconstrained
    log_weights: Tensor  # (M,) normalised log-weights of those samples
    acceptance_rate: float = math.nan  # mean Metropolis acceptance of the moves


def _block_rows(particles: int) -> int:
    return max(1024, BLOCK_ELEMENTS // max(particles, 1))


def full_log_likelihood(model: Model, theta: Tensor, rows: Rows) -> Tensor:
    """Σ_r log p(y_r | x_r, θ_m) over all rows: (M,), in blocks so memory stays bounded."""
    total = torch.zeros(theta.shape[0], dtype=theta.dtype, device=theta.device)
    count, step = rows.count, _block_rows(theta.shape[0])
    for start in range(0, count, step):
        block = rows.slice(start, min(start + step, count))
        total += model.log_likelihood(theta, block.x, block.y).sum(-1)
    return total


def full_log_likelihood_and_grad(
    model: Model, theta: Tensor, rows: Rows, weight: float = 1.0
) -> tuple[Tensor, Tensor]:
    """``weight`` · Σ_r log p(y_r | x_r, θ) (M,) and its gradient (M, D), in blocks."""
    value = torch.zeros(theta.shape[0], dtype=theta.dtype, device=theta.device)
    grad = torch.zeros_like(theta)
    count, step = rows.count, _block_rows(theta.shape[0])
    for start in range(0, count, step):
        block = rows.slice(start, min(start + step, count))
        part_value, part_grad = model.log_likelihood_and_grad(theta, block.x, block.y, weight)
        value += part_value
        grad += part_grad
    return value, grad


def checked(log_likelihood: Tensor) -> Tensor:
    """The full-data log-likelihoods, or ``EstimatorError`` when some are NaN."""
    if torch.isnan(log_likelihood).any():
        raise EstimatorError("the model's log-likelihood is NaN for some parameter value")
    return log_likelihood


class BatchState(NamedTuple):
    particles: Tensor  # (M, D) posterior samples on all rows seen
    log_weights: Tensor  # (M,) normalised
    log_evidence: Tensor  # ()
    log_evidence_variance: Tensor  # () stderr² of the latest full run
    n_observations: Tensor  # () int64


@dataclass(frozen=True)
class RerunInfo:
    """What one update of a re-run reference did: a full run on every row so far."""

    rows: int
    log_evidence_increment: float  # the new run's log Ẑ minus the previous run's
    log_evidence_increment_variance: float  # both runs' variances (they are independent)
    ess: float  # of the run's weighted samples
    iterations: int  # annealing steps (AIS) or dead points (nested sampling)
    likelihood_evaluations: int  # full-data evaluations per point
    acceptance_rate: float


# (model, all rows, settings, generator, deadline) -> the run's evidence and samples
Run = Callable[[Model, Rows, Any, torch.Generator, Deadline | None], BatchEvidence]


class Rerun(NamedTuple):
    """A batch method kept current by re-running it: ``samples`` posterior points kept."""

    model: Model
    settings: Settings
    run: Run
    samples: int


def init(rerun: Rerun, generator: torch.Generator) -> BatchState:
    samples, device = rerun.samples, rerun.settings.torch_device
    zero = torch.zeros((), dtype=torch.float64, device=device)
    return BatchState(
        particles=rerun.model.sample_prior(samples, generator),
        log_weights=torch.full((samples,), -math.log(samples), dtype=torch.float64, device=device),
        log_evidence=zero,
        log_evidence_variance=zero.clone(),
        n_observations=torch.zeros((), dtype=torch.int64, device=device),
    )


def update(
    rerun: Rerun,
    state: BatchState,
    chunk: Rows,
    history: History,
    generator: torch.Generator,
    deadline: Deadline | None = None,
) -> tuple[BatchState, RerunInfo]:
    """A full re-run on history + chunk; the state keeps its posterior samples, resampled to
    ``samples`` equal-weight points when the run returns more (nested sampling returns every
    dead point)."""
    n = int(state.n_observations)
    if len(history) != n:
        raise ValueError(f"history has {len(history)} rows but the state has seen {n}")
    result = rerun.run(rerun.model, all_rows(history, chunk), rerun.settings, generator, deadline)
    particles, log_weights = equal_weight_samples(
        result.particles, result.log_weights, rerun.samples, generator
    )
    variance = result.log_evidence_stderr**2
    device = state.log_evidence.device
    new_state = BatchState(
        particles=particles,
        log_weights=log_weights,
        log_evidence=torch.tensor(result.log_evidence, dtype=torch.float64, device=device),
        log_evidence_variance=torch.tensor(variance, dtype=torch.float64, device=device),
        n_observations=state.n_observations + chunk.count,
    )
    info = RerunInfo(
        rows=chunk.count,
        log_evidence_increment=result.log_evidence - float(state.log_evidence),
        log_evidence_increment_variance=variance + float(state.log_evidence_variance),
        ess=kish_ess(result.log_weights),
        iterations=result.iterations,
        likelihood_evaluations=result.likelihood_evaluations,
        acceptance_rate=result.acceptance_rate,
    )
    return new_state, info


def rerun_estimator(method: str, rerun: Rerun) -> Estimator[BatchState, RerunInfo]:
    """A batch method as an ``Estimator``: each update re-runs it on every row so far."""
    return weighted_particles(
        method,
        rerun.model,
        rerun.settings,
        BatchState,
        rerun.samples,
        functools.partial(init, rerun),
        functools.partial(update, rerun),
    )


def all_rows(history: History, chunk: Rows) -> Rows:
    """The history's rows followed by the chunk's, in one block."""
    if len(history) == 0:
        return chunk
    return cat_rows([*history.blocks(len(history)), chunk])


def equal_weight_samples(
    particles: Tensor, log_weights: Tensor, count: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``count`` equal-weight points drawn from weighted samples by systematic resampling;
    samples that already number ``count`` are kept with their weights."""
    if particles.shape[0] == count:
        return particles, log_weights
    ancestors = systematic(torch.softmax(log_weights, 0), generator, count)
    uniform = torch.full(
        (count,), -math.log(count), dtype=log_weights.dtype, device=log_weights.device
    )
    return particles[ancestors], uniform
