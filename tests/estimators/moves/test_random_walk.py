"""The random-walk minibatch-MH kernel against an exact Gaussian posterior."""

from __future__ import annotations

import math

import pytest
import torch
from gaussian_posterior import ROWS, conjugate_posterior

from modelcompare.estimators.moves import random_walk
from modelcompare.estimators.moves.minibatch_target import MinibatchTarget
from modelcompare.estimators.online.target import anchor_at

CHAINS, STEPS, BURN_IN = 1000, 100, 30


@pytest.mark.slow
def test_random_walk_leaves_the_exact_posterior_invariant() -> None:
    """Chains started 2× over-dispersed converge to the exact posterior mean and covariance.

    All chains share each test's minibatch, so the cloud's moments fluctuate together from step
    to step; they are averaged over the steps after burn-in. Measured over 6 seeds: |mean| ≤ 0.03
    posterior sds, covariance (whitened) within 0.05 of I.
    """
    model, data, mean, cov = conjugate_posterior(0)
    g = torch.Generator().manual_seed(1)
    factor = torch.linalg.cholesky(cov)
    start = mean + 2.0 * torch.randn(CHAINS, 3, generator=g, dtype=torch.float64) @ factor.T
    target = MinibatchTarget(model, data, anchor=anchor_at(model, mean, data))
    state = random_walk.init(start)
    means, covs, accepted, rows = [], [], [], []
    for step in range(STEPS):
        state, info = random_walk.update(state, target, 2.38 / math.sqrt(3) * factor, 50, g)
        accepted.append(float(info.accepted.double().mean()))
        rows.append(float(info.rows.double().mean()))
        if step >= BURN_IN:
            white = torch.linalg.solve_triangular(factor, (state.position - mean).T, upper=False).T
            means.append(white.mean(0))
            covs.append(torch.cov(white.T))
    white_mean, white_cov = torch.stack(means).mean(0), torch.stack(covs).mean(0)
    assert float(white_mean.abs().max()) <= 0.1, white_mean
    assert float((white_cov - torch.eye(3, dtype=torch.float64)).abs().max()) <= 0.12, white_cov
    # Barker acceptance is below Metropolis's (≤ 1/2 at Δ = 0): about 0.22 here.
    assert 0.1 <= sum(accepted[BURN_IN:]) / (STEPS - BURN_IN) <= 0.4
    # Control variates make the per-row terms small: ~90 of 2000 rows read per test.
    assert sum(rows) / STEPS < ROWS / 4


def test_without_an_anchor_the_test_reads_more_rows() -> None:
    model, data, mean, cov = conjugate_posterior(2)
    g = torch.Generator().manual_seed(2)
    factor = torch.linalg.cholesky(cov)
    start = mean + torch.randn(200, 3, generator=g, dtype=torch.float64) @ factor.T
    scale = 2.38 / math.sqrt(3) * factor
    plain = MinibatchTarget(model, data)
    anchored = plain._replace(anchor=anchor_at(model, mean, data))
    state = random_walk.init(start)
    _state, plain_info = random_walk.update(state, plain, scale, 50, g)
    _state, anchored_info = random_walk.update(state, anchored, scale, 50, g)
    assert float(plain_info.rows.double().mean()) > 4 * float(anchored_info.rows.double().mean())
