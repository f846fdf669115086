"""The minibatch-MH estimator (SG-AIS with random-walk minibatch-MH moves)."""

from __future__ import annotations

import pytest

from modelcompare.estimators import OnlineEvidence, exact_log_evidence


@pytest.mark.slow
def test_minibatch_mh_method_matches_exact_evidence(stream) -> None:
    model, x, y = stream("linear_regression", 400, 11)
    tracker = OnlineEvidence(
        model, method="minibatch_mh", seed=11, full_batch_rows=40, batch_size=20, steps=5
    )
    for start in range(0, 400, 100):
        info = tracker.update(x[start : start + 100], y[start : start + 100])
    assert 0.05 < info.acceptance_rate < 0.5  # random walks only (n > 40); Barker's ≤ 1/2
    error = tracker.log_evidence - exact_log_evidence(model, x, y)
    # The SG-AIS allowance for linear regression (online/test_sgais.py) plus 4 stderrs.
    assert abs(error) <= 0.75 + 4 * tracker.log_evidence_stderr, error
