"""Sequential SGHMC (no annealing): one plain predictive average per piece, weights reset."""

from __future__ import annotations

import math

import pytest

from modelcompare.estimators import OnlineEvidence, exact_log_evidence


def run(stream, family: str, seed: int, method: str, rows: int = 300, post: int = 50):
    model, x, y = stream(family, rows, seed)
    tracker = OnlineEvidence(model, method=method, seed=seed)
    infos = [
        tracker.update(None if x is None else x[s : s + post], y[s : s + post])
        for s in range(0, rows, post)
    ]
    return tracker, infos, exact_log_evidence(model, x, y)


def test_one_step_per_piece_and_uniform_weights(stream) -> None:
    tracker, infos, _ = run(stream, "beta_bernoulli", 0, "sequential")
    for info in infos:
        assert not hasattr(info, "annealing_steps")  # λ jumps straight to 1: nothing to count
        assert 1.0 <= info.min_ess <= 64.0 and math.isfinite(info.log_evidence_increment)
    assert tracker.estimator.ess(tracker.state) == pytest.approx(64.0)  # weights dropped
    assert tracker.n_observations == 300
    total = sum(i.log_evidence_increment for i in infos)
    variance = sum(i.log_evidence_increment_variance for i in infos)
    assert tracker.log_evidence == pytest.approx(total + variance / 2)  # log Ẑ + σ̂²/2


@pytest.mark.slow
def test_sequential_is_the_weaker_peer(stream) -> None:
    """Measured once at N = 300 (8 seeds, 50-row POSTs): sequential errs by −5.9 ± 5.8 nats on
    linear regression where SG-AIS errs by −0.4 ± 0.4, and by −0.25 ± 0.27 on Beta–Bernoulli.
    Checks: it is within 2 nats on the one-parameter model, and worse than SG-AIS on linear
    regression summed over 4 seeds."""
    for seed in range(4):
        tracker, _, exact = run(stream, "beta_bernoulli", seed, "sequential")
        assert abs(tracker.log_evidence - exact) < 2.0
    sequential = sgais = 0.0
    for seed in range(4):
        tracker, _, exact = run(stream, "linear_regression", seed, "sequential")
        sequential += abs(tracker.log_evidence - exact)
        tracker, _, exact = run(stream, "linear_regression", seed, "sgais")
        sgais += abs(tracker.log_evidence - exact)
    assert sequential > sgais
