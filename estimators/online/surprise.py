"""Robustness to surprise: when a piece is far from what the particles explain, re-anchor the
control variates at once and spend more moves on the new posterior.

After a change point the annealing ladder of a piece grows long and its ESS collapses: the
particles arrive far from the new posterior, a few survive the reweighting, and the per-piece
moves (one trajectory per annealing step, on control variates anchored where the posterior used
to be) leave them behind it; the next pieces then inherit a biased cloud whose bias the error bar
does not see. Two remedies:

- the anchor is re-set as soon as the weighted particle mean has drifted more than
  ``anchor_drift`` posterior standard deviations (of any coordinate) from it, not only once n has
  grown by ``anchor_growth``: a far anchor inflates the minibatch-gradient noise;
- after a piece that took more than ``surprise_steps`` annealing steps, or whose ESS fell below
  ``surprise_ess`` · M, the anchor is re-set at the new weighted mean and ``surprise_moves`` more
  moves are made at λ = 1 (the posterior given the past and the piece).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, Rows
from modelcompare.estimators.deadline import Checkpoint
from modelcompare.estimators.online.target import (
    Anchor,
    Piece,
    anchor_at_mean,
    past_data,
    with_piece,
)
from modelcompare.estimators.smc.covariance import particle_scale
from modelcompare.estimators.smc.tempered import StepInfo, TemperedSMC, settled
from modelcompare.models import Model


class Surprise(NamedTuple):
    steps: int  # a piece annealed in more steps than this is surprising
    ess: float  # ... or one whose ESS fell below this fraction of M
    moves: int  # extra moves at λ = 1 after a surprising piece (0: none)


def drifted(particles: Tensor, log_weights: Tensor, anchor_point: Tensor, drift: float) -> bool:
    """Whether the weighted particle mean is more than ``drift`` weighted standard deviations
    from the anchor in some coordinate."""
    weights = torch.softmax(log_weights, 0)
    mean = weights @ particles
    spread = torch.sqrt(weights @ (particles - mean) ** 2).clamp_min(1e-12)
    return bool(((mean - anchor_point).abs() / spread).max() > drift)


def surprising(surprise: Surprise, steps: tuple[StepInfo, ...], particles: int) -> bool:
    least_ess = min((info.ess for info in steps), default=float(particles))
    return len(steps) > surprise.steps or least_ess < surprise.ess * particles


class Rejuvenated(NamedTuple):
    particles: Tensor
    anchor: Anchor | None  # the new anchor over ``history`` (None: no control variates)


def rejuvenate(
    model: Model,
    parts: Callable[[Piece], TemperedSMC],
    moves: int,
    particles: Tensor,
    log_weights: Tensor,
    rows: Rows,
    history: History,
    full_batch_rows: int,
    batch_size: int,
    control_variates: bool,
    generator: torch.Generator,
    checkpoint: Checkpoint,
) -> Rejuvenated:
    """``moves`` more moves on the posterior given ``history`` and ``rows``, with the anchor
    (when the past is read in minibatches with control variates) re-set at the weighted mean."""
    anchor = None
    if control_variates and len(history) > full_batch_rows:
        anchor = with_piece(model, anchor_at_mean(model, particles, log_weights, history), rows)
    smc = parts(Piece(model, rows, past_data(history, full_batch_rows, batch_size, anchor)))
    for _ in range(moves):
        checkpoint()
        scale = particle_scale(particles, log_weights)
        moved = smc.move(particles, 1.0, scale, generator, checkpoint).particles
        particles = settled(smc, particles, moved)[0]
    return Rejuvenated(particles, anchor)
