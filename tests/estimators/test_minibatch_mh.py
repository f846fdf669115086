"""The random-walk minibatch-MH kernel against an exact Gaussian posterior, and its estimator."""

from __future__ import annotations

import math

import torch

from estimators import OnlineEvidence, exact_log_evidence, minibatch_mh
from estimators.gradients import anchor_at
from estimators.history import Rows, RowsHistory
from estimators.minibatch_target import MinibatchTarget
from models import LinearRegression

ROWS, CHAINS, STEPS, BURN_IN = 2000, 1000, 100, 30


def conjugate_posterior(
    seed: int,
) -> tuple[LinearRegression, RowsHistory, torch.Tensor, torch.Tensor]:
    """Linear regression with 2 inputs: data, exact posterior mean (3,) and covariance (3, 3)."""
    g = torch.Generator().manual_seed(seed)
    model = LinearRegression(2)
    x = torch.randn(ROWS, 2, generator=g, dtype=torch.float64)
    noise = torch.randn(ROWS, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([0.5, -1.0], dtype=torch.float64) + 0.3 + noise
    stats = model.update_stats(model.prior_stats(), x, y)
    cov = torch.linalg.inv(stats["precision"])
    return model, RowsHistory(Rows(x, y)), cov @ stats["shift"], cov


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
    state = minibatch_mh.init(start)
    means, covs, accepted, rows = [], [], [], []
    for step in range(STEPS):
        state, info = minibatch_mh.update(state, target, 2.38 / math.sqrt(3) * factor, 50, g)
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
    state = minibatch_mh.init(start)
    _state, plain_info = minibatch_mh.update(state, plain, scale, 50, g)
    _state, anchored_info = minibatch_mh.update(state, anchored, scale, 50, g)
    assert float(plain_info.rows.double().mean()) > 4 * float(anchored_info.rows.double().mean())


def test_minibatch_mh_method_matches_exact_evidence(stream) -> None:
    model, x, y = stream("linear_regression", 400, 11)
    tracker = OnlineEvidence(
        model, method="minibatch_mh", seed=11, full_batch_rows=40, batch_size=20, steps=5
    )
    for start in range(0, 400, 100):
        info = tracker.update(x[start : start + 100], y[start : start + 100])
    assert 0.05 < info.acceptance_rate < 0.5  # random walks only (n > 40); Barker's ≤ 1/2
    error = tracker.log_evidence - exact_log_evidence(model, x, y)
    # The SG-AIS allowance for linear regression (tests/estimators/test_sgais.py) plus 4 stderrs.
    assert abs(error) <= 0.75 + 4 * tracker.log_evidence_stderr, error
