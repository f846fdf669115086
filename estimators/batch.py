"""What the full-data (batch) reference estimators share: their result record, blocked passes
over all rows, and the ``Estimator`` wrapper that re-runs them on the whole history per update.

A batch estimator sees every row at once, so keeping it current on a stream costs a full re-run
per chunk: quadratic in N overall. That is the point of comparing SG-AIS against them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from estimators.base import EstimatorError, Info
from estimators.history import History, Rows, cat_rows
from estimators.weights import ess as kish_ess
from models import Model, Prediction

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
    total = torch.zeros(theta.shape[0], dtype=theta.dtype)
    count, step = rows.count, _block_rows(theta.shape[0])
    for start in range(0, count, step):
        block = rows.slice(start, min(start + step, count))
        total += model.log_likelihood(theta, block.x, block.y).sum(-1)
    return total


def full_log_likelihood_and_grad(
    model: Model, theta: Tensor, rows: Rows, weight: float = 1.0
) -> tuple[Tensor, Tensor]:
    """``weight`` · Σ_r log p(y_r | x_r, θ) (M,) and its gradient (M, D), in blocks."""
    value = torch.zeros(theta.shape[0], dtype=theta.dtype)
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


RunFn = Callable[[Model, Rows, Any, torch.Generator], BatchEvidence]


class BatchEstimator:
    """The ``Estimator`` protocol for a batch method: each update re-runs it on history + chunk.

    The state keeps the run's posterior samples, resampled to ``samples`` equal-weight points
    when the run returns more (nested sampling returns every dead point).
    """

    state_type = BatchState

    def __init__(self, model: Model, config: Any, run: RunFn, samples: int) -> None:
        self.model = model
        self.config = config
        self._run = run
        self._samples = samples

    def init(self, generator: torch.Generator) -> BatchState:
        m = self._samples
        zero = torch.zeros((), dtype=torch.float64)
        return BatchState(
            particles=self.model.sample_prior(m, generator),
            log_weights=torch.full((m,), -math.log(m), dtype=torch.float64),
            log_evidence=zero,
            log_evidence_variance=zero.clone(),
            n_observations=torch.zeros((), dtype=torch.int64),
        )

    def log_evidence(self, state: BatchState) -> float:
        return float(state.log_evidence)

    def log_evidence_variance(self, state: BatchState) -> float:
        return float(state.log_evidence_variance)

    def n_observations(self, state: BatchState) -> int:
        return int(state.n_observations)

    def ess(self, state: BatchState) -> float:
        return kish_ess(state.log_weights)

    def predict(self, state: BatchState, x: Tensor | None) -> Prediction:
        return self.model.predict(state.particles, state.log_weights, x)

    def update(
        self, state: BatchState, chunk: Rows, history: History, generator: torch.Generator
    ) -> tuple[BatchState, Info]:
        n = int(state.n_observations)
        if len(history) != n:
            raise ValueError(f"history has {len(history)} rows but the state has seen {n}")
        result = self._run(self.model, all_rows(history, chunk), self.config, generator)
        particles, log_weights = equal_weight_samples(
            result.particles, result.log_weights, self._samples, generator
        )
        variance = result.log_evidence_stderr**2
        new_state = BatchState(
            particles=particles,
            log_weights=log_weights,
            log_evidence=torch.tensor(result.log_evidence, dtype=torch.float64),
            log_evidence_variance=torch.tensor(variance, dtype=torch.float64),
            n_observations=state.n_observations + chunk.count,
        )
        info = Info(
            rows=chunk.count,
            log_evidence_increment=result.log_evidence - float(state.log_evidence),
            # A re-run is independent of the previous run: the difference carries both variances.
            log_evidence_increment_variance=variance + float(state.log_evidence_variance),
            ess=kish_ess(result.log_weights),
            min_ess=kish_ess(result.log_weights),
            annealing_steps=result.iterations,
            resamples=0,
            sub_chunks=1,
            reanchors=0,
            acceptance_rate=result.acceptance_rate,
        )
        return new_state, info


def all_rows(history: History, chunk: Rows) -> Rows:
    """The history's rows followed by the chunk's, in one block."""
    if len(history) == 0:
        return chunk
    return cat_rows([*history.blocks(len(history)), chunk])


def equal_weight_samples(
    particles: Tensor, log_weights: Tensor, count: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``count`` equal-weight points drawn from weighted samples by systematic resampling (one
    uniform offset, ``count`` evenly spaced points on the weights' CDF); samples that already
    number ``count`` are kept with their weights."""
    if particles.shape[0] == count:
        return particles, log_weights
    cdf = torch.cumsum(torch.softmax(log_weights, 0), 0)
    cdf[-1] = 1.0  # guard against round-off leaving the last bin short
    offset = torch.rand(1, generator=generator, dtype=log_weights.dtype)
    points = (torch.arange(count, dtype=log_weights.dtype) + offset) / count
    ancestors = torch.searchsorted(cdf, points, right=True).clamp_(max=particles.shape[0] - 1)
    return particles[ancestors], torch.full((count,), -math.log(count), dtype=log_weights.dtype)
