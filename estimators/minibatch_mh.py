"""Random-walk Metropolis–Hastings with the minibatch Barker test (Seita et al. 2017).

A kernel over M independent chains (one per particle): θ' = θ + s·L ξ, ξ ~ N(0, I), a symmetric
proposal (no proposal term in Δ), accepted by ``barker_log_ratio_test`` on a ``MinibatchTarget``.
``init`` + ``update`` returning ``(State, Info)`` with an explicit generator, as in BlackJAX.

The ``minibatch_mh`` estimator is SG-AIS whose minibatch moves (n > ``full_batch_rows``) are
``steps`` of these random walks, with L the weighted particle covariance's Cholesky factor and
s = 2.38/√D (Roberts & Rosenthal 2001, the optimal random-walk scale for Gaussian targets).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from estimators.gradients import PastData
from estimators.history import Rows
from estimators.minibatch_target import MinibatchTarget, barker_log_ratio_test
from estimators.sgais import SGAIS, _Tally


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
    noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype)
    proposal = theta + noise @ scale.T
    symmetric = torch.zeros(theta.shape[0], dtype=theta.dtype)
    test = barker_log_ratio_test(target, theta, proposal, symmetric, batch_size, generator)
    position = torch.where(test.accept[:, None], proposal, theta)
    return RandomWalkState(position), RandomWalkInfo(test.accept, test.rows, test.log_ratio)


class MinibatchMH(SGAIS):
    """SG-AIS with minibatch random-walk MH moves instead of SGHMC (method ``minibatch_mh``)."""

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
        cfg = self.config
        target = MinibatchTarget(self.model, past.history, piece, temperature, past.anchor)
        proposal_scale = 2.38 / math.sqrt(theta.shape[1]) * scale
        state = init(theta)
        for _ in range(cfg.steps):
            state, info = update(state, target, proposal_scale, cfg.batch_size, generator)
            tally.acceptance.append(float(info.accepted.double().mean()))
        return state.position
