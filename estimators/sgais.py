"""Stochastic-gradient annealed importance sampling (SG-AIS) over a data stream.

Each chunk is annealed in with temperatures 0 = λ_0 < … < λ_T = 1 chosen by conditional-ESS
bisection; log p(chunk | past) is the sum over steps of log Σ_i W_i p(chunk|θ_i)^Δ (SMC, Del Moral
et al. 2006, eq. 14), so log Z is always a sum of per-step increments of normalised weights.
Particles are resampled when their ESS falls below a threshold and moved by SGHMC on the tempered
target. Chunks larger than the schedule allows are split (see ``schedule``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import torch
from torch import Tensor

from estimators.annealing import next_increment
from estimators.base import EstimatorError, Info, check, check_int, check_number
from estimators.corrected_moves import corrected_sghmc_move
from estimators.gradients import (
    Anchor,
    PastData,
    anchor_at,
    grad_log_target,
    gradient_noise,
    log_target,
    past_data,
)
from estimators.history import ExtendedHistory, History, Rows
from estimators.hmc import hmc_move
from estimators.minibatch_target import MinibatchTarget
from estimators.moves import MoveConfig, particle_scale, sghmc_step
from estimators.relabeling import align_labels, is_label_symmetric
from estimators.resampling import RESAMPLERS
from estimators.schedule import split_points
from estimators.sghmc import sghmc_move
from estimators.weights import ess as kish_ess
from estimators.weights import log_mean_increment, log_normalize
from models import Model, Prediction


@dataclass(frozen=True)
class SGAISConfig(MoveConfig):
    ess_target: float = 0.8  # conditional-ESS fraction each annealing step keeps
    resample_threshold: float = 0.5  # resample when ESS / M falls below this
    resampling: str = "systematic"
    max_annealing_steps: int = 1000  # per sub-chunk; a safeguard, far above what data needs

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("ess_target", self.ess_target, 0.0, 1.0 - 1e-9)
        check_number("resample_threshold", self.resample_threshold, 0.0, 1.0, closed_below=True)
        check(
            self.resampling in RESAMPLERS,
            f"resampling must be one of {sorted(RESAMPLERS)}, got {self.resampling!r}",
        )
        check_int("max_annealing_steps", self.max_annealing_steps, 1)


class SGAISState(NamedTuple):
    particles: Tensor  # (M, D)
    log_weights: Tensor  # (M,), normalised
    log_evidence: Tensor  # ()
    log_evidence_variance: Tensor  # () sum of per-step delta-method variances
    n_observations: Tensor  # () int64
    anchor_point: Tensor  # (D,) control-variate anchor θ_a
    anchor_grad: Tensor  # (D,) Σ over all past rows of ∇ log p(y_i | θ_a)
    anchor_rows: Tensor  # () int64: rows seen when the anchor was set; 0 = no anchor yet


@dataclass
class _Tally:
    log_evidence: float = 0.0
    variance: float = 0.0
    min_ess: float = math.inf
    annealing_steps: int = 0
    resamples: int = 0
    sub_chunks: int = 0
    reanchors: int = 0
    acceptance: list[float] = field(default_factory=list)


class SGAIS:
    state_type = SGAISState

    def __init__(self, model: Model, config: SGAISConfig) -> None:
        self.model = model
        self.config: MoveConfig = config
        self._resample = RESAMPLERS[config.resampling]
        self._max_annealing_steps = config.max_annealing_steps

    @cached_property
    def _label_symmetric(self) -> bool:
        return is_label_symmetric(self.model)

    def init(self, generator: torch.Generator) -> SGAISState:
        m, d = self.config.particles, self.model.param_dim
        zero = torch.zeros((), dtype=torch.float64)
        return SGAISState(
            particles=self.model.sample_prior(m, generator),
            log_weights=torch.full((m,), -math.log(m), dtype=torch.float64),
            log_evidence=zero,
            log_evidence_variance=zero.clone(),
            n_observations=torch.zeros((), dtype=torch.int64),
            anchor_point=torch.zeros(d, dtype=torch.float64),
            anchor_grad=torch.zeros(d, dtype=torch.float64),
            anchor_rows=torch.zeros((), dtype=torch.int64),
        )

    def log_evidence(self, state: SGAISState) -> float:
        return float(state.log_evidence)

    def log_evidence_variance(self, state: SGAISState) -> float:
        return float(state.log_evidence_variance)

    def n_observations(self, state: SGAISState) -> int:
        return int(state.n_observations)

    def ess(self, state: SGAISState) -> float:
        return kish_ess(state.log_weights)

    def predict(self, state: SGAISState, x: Tensor | None) -> Prediction:
        return self.model.predict(state.particles, state.log_weights, x)

    def update(
        self, state: SGAISState, chunk: Rows, history: History, generator: torch.Generator
    ) -> tuple[SGAISState, Info]:
        n = int(state.n_observations)
        if len(history) != n:
            raise ValueError(f"history has {len(history)} rows but the state has seen {n}")
        tally = _Tally()
        for start, stop in split_points(n, chunk.count):
            seen = ExtendedHistory(history, chunk.slice(0, start)) if start else history
            state = self._absorb(state, chunk.slice(start, stop), seen, generator, tally)
        info = Info(
            rows=chunk.count,
            log_evidence_increment=tally.log_evidence,
            log_evidence_increment_variance=tally.variance,
            ess=kish_ess(state.log_weights),
            min_ess=tally.min_ess,
            annealing_steps=tally.annealing_steps,
            resamples=tally.resamples,
            sub_chunks=tally.sub_chunks,
            reanchors=tally.reanchors,
            acceptance_rate=(
                sum(tally.acceptance) / len(tally.acceptance) if tally.acceptance else math.nan
            ),
        )
        return state, info

    def _anchor(self, state: SGAISState, history: History) -> tuple[Anchor | None, bool]:
        """The control-variate anchor for this piece, and whether it was just (re)set."""
        n = len(history)
        if not self.config.control_variates or n <= self.config.full_batch_rows:
            return None, False
        rows = int(state.anchor_rows)
        if rows > 0 and n < self.config.anchor_growth * rows:
            return Anchor(state.anchor_point, state.anchor_grad), False
        # Re-anchor at the weighted particle mean once n has grown by ``anchor_growth``: one
        # full pass at one point, so the full-data cost stays amortised O(1) per row.
        weights = torch.softmax(state.log_weights, 0)
        return anchor_at(self.model, weights @ state.particles, history), True

    def _absorb(
        self,
        state: SGAISState,
        piece: Rows,
        history: History,
        generator: torch.Generator,
        tally: _Tally,
    ) -> SGAISState:
        cfg, model = self.config, self.model
        anchor, reanchored = self._anchor(state, history)
        tally.reanchors += int(reanchored)
        past = past_data(history, cfg.full_batch_rows, cfg.batch_size, anchor)
        theta, log_w = state.particles, state.log_weights
        log_lik = _chunk_log_likelihood(model, theta, piece)
        temperature, steps, log_evidence, variance = 0.0, 0, 0.0, 0.0
        while temperature < 1.0:
            if steps >= self._max_annealing_steps:
                raise EstimatorError(
                    f"annealing reached only λ = {temperature:.3g} in {steps} steps; the chunk "
                    "is far outside what the particles can explain"
                )
            remaining = 1.0 - temperature
            delta = self._next_increment(log_w, log_lik, remaining)
            if delta < 1e-12 * remaining:
                raise EstimatorError(
                    f"annealing stalled at λ = {temperature:.3g}: the chunk's log-likelihood "
                    f"spans {float(log_lik.max() - log_lik.min()):.3g} nats across particles"
                )
            step_log_evidence, step_variance = log_mean_increment(log_w, delta * log_lik)
            log_evidence += step_log_evidence
            variance += step_variance
            log_w = log_normalize(log_w + delta * log_lik)
            temperature = 1.0 if delta >= remaining else temperature + delta
            steps += 1
            if self._label_symmetric:
                theta = align_labels(model, theta, log_w)  # log_lik is unchanged by relabelling
            scale = particle_scale(theta, log_w)  # before resampling: W carries the target
            current_ess = kish_ess(log_w)
            tally.min_ess = min(tally.min_ess, current_ess)
            theta, log_w = self._select(theta, log_w, current_ess, generator, tally)
            rows = len(history) + temperature * piece.count
            theta = self._move(theta, piece, temperature, past, scale, rows, generator, tally)
            log_lik = _chunk_log_likelihood(model, theta, piece)
        tally.annealing_steps += steps
        tally.sub_chunks += 1
        tally.log_evidence += log_evidence
        tally.variance += variance
        if anchor is not None:
            # The piece joins the past: its gradient at θ_a joins the anchor's full-data sum.
            at_anchor = model.grad_log_likelihood(anchor.point[None], piece.x, piece.y)[0]
            anchor = Anchor(anchor.point, anchor.grad_sum + at_anchor)
        return SGAISState(
            particles=theta,
            log_weights=log_w,
            log_evidence=state.log_evidence + log_evidence,
            log_evidence_variance=state.log_evidence_variance + variance,
            n_observations=state.n_observations + piece.count,
            anchor_point=state.anchor_point if anchor is None else anchor.point,
            anchor_grad=state.anchor_grad if anchor is None else anchor.grad_sum,
            anchor_rows=torch.tensor(len(history)) if reanchored else state.anchor_rows,
        )

    def _next_increment(self, log_w: Tensor, log_lik: Tensor, remaining: float) -> float:
        return next_increment(log_w, log_lik, remaining, self.config.ess_target)

    def _select(
        self,
        theta: Tensor,
        log_w: Tensor,
        current_ess: float,
        generator: torch.Generator,
        tally: _Tally,
    ) -> tuple[Tensor, Tensor]:
        """Resample (ESS-triggered) before the move."""
        m = self.config.particles
        if current_ess >= self.config.resample_threshold * m:
            return theta, log_w
        tally.resamples += 1
        ancestors = self._resample(torch.exp(log_w), generator)
        return theta[ancestors], torch.full_like(log_w, -math.log(m))

    def _move(
        self,
        theta: Tensor,
        piece: Rows,
        temperature: float,
        past: PastData,
        scale: Tensor,
        rows: float,
        generator: torch.Generator,
        tally: _Tally,
    ) -> Tensor:
        """Exact HMC while the past is used in full; minibatch moves after."""
        cfg, model = self.config, self.model
        if past.full is not None or len(past.history) == 0:
            for _ in range(cfg.hmc_moves):
                theta, acceptance = hmc_move(
                    theta,
                    lambda position: log_target(model, position, piece, temperature, past),
                    scale,
                    cfg.hmc_step,
                    cfg.leapfrog_steps,
                    generator,
                )
                tally.acceptance.append(acceptance)
            return theta
        return self._minibatch_move(theta, piece, temperature, past, scale, rows, generator, tally)

    def _minibatch_move(
        self,
        theta: Tensor,
        piece: Rows,
        temperature: float,
        past: PastData,
        scale: Tensor,
        rows: float,
        generator: torch.Generator,
        tally: _Tally,
    ) -> Tensor:
        """SGHMC on minibatches of the past; Metropolis-adjusted when ``mh_correction`` asks."""
        cfg, model = self.config, self.model

        def grad(position: Tensor) -> Tensor:
            return grad_log_target(model, position, piece, temperature, past, generator)

        step, scale = sghmc_step(cfg, scale, rows)
        if cfg.mh_correction == "none":
            noise = gradient_noise(model, theta, past, generator) if cfg.noise_friction else None
            return sghmc_move(theta, grad, step, scale, cfg.friction, cfg.steps, generator, noise)
        target = MinibatchTarget(model, past.history, piece, temperature, past.anchor)
        move = corrected_sghmc_move(
            theta, target, grad, step, scale, cfg.friction, cfg.steps, cfg.batch_size, generator
        )
        tally.acceptance.append(float(move.test.accept.double().mean()))
        return move.position


def _chunk_log_likelihood(model: Model, theta: Tensor, piece: Rows) -> Tensor:
    log_lik = model.log_likelihood(theta, piece.x, piece.y).sum(-1)
    if torch.isnan(log_lik).any():
        raise EstimatorError("the model's log-likelihood is NaN for some particle")
    if not torch.isfinite(log_lik).any():
        raise EstimatorError(
            "the chunk has zero likelihood (log-likelihood −∞ or +∞) under every particle"
        )
    return log_lik
