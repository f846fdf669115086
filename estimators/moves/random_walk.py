"""Random-walk Metropolis–Hastings with the minibatch Barker test (Seita et al. 2017).

A kernel over M independent chains (one per particle): θ' = θ + s·L ξ, ξ ~ N(0, I), a symmetric
proposal (no proposal term in Δ), accepted by ``barker_log_ratio_test`` on a ``MinibatchTarget``.
``init`` + ``update`` returning ``(State, Info)`` with an explicit generator, as in BlackJAX.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from modelcompare.estimators.moves.minibatch_target import MinibatchTarget, barker_log_ratio_test


class RandomWalkState(NamedTuple):
    position: Tensor  # (M, D)


class RandomWalkInfo(NamedTuple):
    accepted: Tensor  # (M,) bool
    rows: Tensor  # (M,) int64: data rows the Barker test read per chain
    log_ratio: Tensor  # (M,) the Δ* estimate each decision used


def init(position: Tensor) -> RandomWalkState:
    return RandomWalkState(position)


def update(
    state: RandomWalkState,
    target: MinibatchTarget,
    scale: Tensor,
    batch_size: int,
    generator: torch.Generator,
) -> tuple[RandomWalkState, RandomWalkInfo]:
    """One random-walk step per chain; ``scale`` is the proposal's factor s·L (D, D)."""
    theta = state.position
    noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=theta.device)
    proposal = theta + noise @ scale.T
    symmetric = torch.zeros(theta.shape[0], dtype=theta.dtype, device=theta.device)
    test = barker_log_ratio_test(target, theta, proposal, symmetric, batch_size, generator)
    position = torch.where(test.accept[:, None], proposal, theta)
    return RandomWalkState(position), RandomWalkInfo(test.accept, test.rows, test.log_ratio)
