"""The score of the past's posterior, ∇ log π₀(θ) = ∇ log p(θ) + Σ_{i≤n} ∇ log p(y_i | θ), at each
particle: the control variates of a piece's first annealing step (``smc.control_variates``),
E_π₀[∇ log π₀] = 0. From a reference q (``gaussian_start``) π₀ is q.

While the past is used in full the score is exact; after that it is the minibatch estimate the
SGHMC moves read (``target.grad_log_target`` at λ = 0: control-variate gradients anchored near
the posterior, one minibatch of ``batch_size`` rows shared by every particle). Its noise has mean
zero, so the controls keep mean zero; it only weakens the fit.
"""

from __future__ import annotations

import torch
from torch import Tensor

from modelcompare.estimators.online.target import Piece, exact_target, grad_log_target
from modelcompare.estimators.smc.tempered import Control


def past_score(piece: Piece) -> Control:
    """``Control`` of ``piece``: (θ, generator) -> ∇ log π₀(θ) (M, D)."""

    def score(theta: Tensor, generator: torch.Generator) -> Tensor:
        if piece.past_in_full:
            target = exact_target(
                piece.model, piece.rows, 0.0, piece.past, theta.dtype, piece.reference
            )
            return target.grad(theta)
        return grad_log_target(piece.model, theta, piece.rows, 0.0, piece.past, generator)

    return score
