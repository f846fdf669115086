"""The control-variate anchor θ_a of the past's minibatch gradients, kept near the particles.

The minibatch gradient of the past (``target``) is exact at θ_a and its noise grows with
|θ − θ_a|: for a linear-Gaussian row ∇ℓ_b(θ) − ∇ℓ_b(θ_a) = −x_b x_bᵀ (θ − θ_a). So the anchor is
the weighted particle mean, re-set once n has grown by ``anchor_growth`` since it was set (one
pass over the past at one point: the full-data cost stays amortised O(1) per row), and at once,
between pieces or between the annealing steps of one piece, when the mean has drifted more than
``anchor_drift`` weighted standard deviations from it: after a change point the posterior moves
many standard deviations within one piece, and moves on gradients anchored where it used to be
sample a law hotter than π_λ.
"""

from __future__ import annotations

import torch
from torch import Tensor

from modelcompare.estimators.data.history import History, Rows
from modelcompare.estimators.online.settings import PastDataSettings
from modelcompare.estimators.online.state import AnchorState, ParticleState
from modelcompare.estimators.online.target import Anchor, PastData, anchor_at_mean, with_piece
from modelcompare.models import Model


def drifted(particles: Tensor, log_weights: Tensor, anchor_point: Tensor, drift: float) -> bool:
    """Whether the weighted particle mean is more than ``drift`` weighted standard deviations
    from the anchor in some coordinate."""
    weights = torch.softmax(log_weights, 0)
    mean = weights @ particles
    spread = torch.sqrt(weights @ (particles - mean) ** 2).clamp_min(1e-12)
    return bool(((mean - anchor_point).abs() / spread).max() > drift)


def piece_anchor(
    model: Model,
    settings: PastDataSettings,
    full_batch_rows: int,
    state: ParticleState,
    history: History,
) -> tuple[Anchor | None, bool]:
    """The anchor for the next piece, and whether it was just (re)set: none while the past is
    read in full or without control variates."""
    n = len(history)
    if not settings.control_variates or n <= full_batch_rows:
        return None, False
    anchor, rows = state.anchor, int(state.anchor.rows)
    if (
        rows > 0
        and n < settings.anchor_growth * rows
        and not drifted(state.particles, state.log_weights, anchor.point, settings.anchor_drift)
    ):
        return Anchor(anchor.point, anchor.grad), False
    return anchor_at_mean(model, state.particles, state.log_weights, history), True


def followed(
    model: Model, rows: Rows, past: PastData, particles: Tensor, log_weights: Tensor, drift: float
) -> PastData | None:
    """``past`` re-anchored at the weighted mean of the particles reached within a piece of
    ``rows`` when they have drifted from its anchor; None when it stays."""
    if past.anchor is None or not drifted(particles, log_weights, past.anchor.point, drift):
        return None
    at_mean = anchor_at_mean(model, particles, log_weights, past.history)
    return past._replace(anchor=with_piece(model, at_mean, rows))


def stored(before: AnchorState, anchor: Anchor | None, reset: bool, rows_seen: int) -> AnchorState:
    """The state's anchor after a piece: the piece's rows join the past, so its gradient at θ_a
    joins the anchor's full-data sum; ``rows_seen`` (the rows before the piece) when it was
    re-set during it."""
    if anchor is None:
        return before
    grad = anchor.grad_sum if anchor.piece_grad is None else anchor.grad_sum + anchor.piece_grad
    rows = torch.tensor(rows_seen, device=before.rows.device) if reset else before.rows
    return AnchorState(anchor.point, grad, rows)
