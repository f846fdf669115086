"""The exact estimator: sequential closed-form updates reproduce the batch evidence formula."""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators import (
    EstimatorConfigError,
    InMemoryHistory,
    OnlineEvidence,
    Rows,
    build,
    exact_log_evidence,
    state_from_bytes,
    state_to_bytes,
)
from modelcompare.estimators.data.rng import derive_generator
from modelcompare.estimators.online.exact import StatsLayout
from modelcompare.models import LinearRegression, LogisticRegression

CONJUGATE = [
    "linear_regression",
    "linear_regression_unknown_noise",
    "beta_bernoulli",
    "gamma_poisson",
]
CHUNKS = [1, 7, 2, 30, 5, 1, 54]  # uneven on purpose: 100 rows


@pytest.mark.parametrize("family", CONJUGATE)
def test_sequential_exact_equals_batch_evidence(stream, family: str) -> None:
    model, x, y = stream(family, sum(CHUNKS), 0)
    estimator = build(model, "exact")
    state = estimator.init(derive_generator(0, "init"))
    history = InMemoryHistory(None if x is None else x.shape[1])
    start, increments = 0, []
    for size in CHUNKS:
        rows = Rows(None if x is None else x[start : start + size], y[start : start + size])
        state, info = estimator.update(state, rows, history, derive_generator(0, start))
        history.append(rows)
        increments.append(info.log_evidence_increment)
        assert info.rows == size
        start += size
    batch = float(model.batch_log_evidence(x, y))
    # Two algebraically different paths (Cholesky of the posterior precision per chunk vs. one
    # data-space Gaussian), so agreement is to round-off, not bit-exact.
    assert estimator.log_evidence(state) == pytest.approx(batch, rel=1e-10, abs=1e-8)
    assert sum(increments) == pytest.approx(batch, rel=1e-10, abs=1e-8)
    assert estimator.n_observations(state) == len(y)
    assert estimator.log_evidence_variance(state) == 0.0
    # The posterior reached chunk by chunk is the posterior of all the data at once.
    together = model.update_stats(model.prior_stats(), x, y)
    for name, value in StatsLayout(model.prior_stats()).unflatten(state.stats).items():
        torch.testing.assert_close(value, together[name], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("family", CONJUGATE)
def test_online_exact_and_exact_log_evidence_agree(stream, family: str) -> None:
    model, x, y = stream(family, 60, 1)
    tracker = OnlineEvidence(model, method="exact")
    for start in range(0, 60, 25):
        tracker.update(None if x is None else x[start : start + 25], y[start : start + 25])
    batch = exact_log_evidence(model, x, y)
    assert tracker.log_evidence == pytest.approx(batch, rel=1e-10, abs=1e-8)
    assert tracker.log_evidence_stderr == 0.0
    assert tracker.n_observations == 60
    restored = state_from_bytes(type(tracker.state), state_to_bytes(tracker.state))
    assert all(torch.equal(a, b) for a, b in zip(restored, tracker.state, strict=True))


def test_exact_rejects_models_without_closed_form() -> None:
    model = LogisticRegression(2, classes=3)
    with pytest.raises(EstimatorConfigError, match="no closed-form"):
        build(model, "exact")
    with pytest.raises(EstimatorConfigError):
        OnlineEvidence(model, method="exact")
    with pytest.raises(TypeError):
        exact_log_evidence(model, [[0.0, 1.0]], [1])


def test_exact_rejects_sampler_settings(stream) -> None:
    model, _, _ = stream("beta_bernoulli", 1, 0)
    with pytest.raises(EstimatorConfigError):
        OnlineEvidence(model, method="exact", lr=0.1)


def test_exact_and_sgais_predictions_agree_on_linear_regression() -> None:
    g = torch.Generator().manual_seed(11)
    x = torch.randn(300, 2, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -0.5], dtype=torch.float64) + torch.randn(
        300, generator=g, dtype=torch.float64
    )
    exact = OnlineEvidence(LinearRegression(2), method="exact")
    sgais = OnlineEvidence(LinearRegression(2), particles=256, seed=0)
    for start in range(0, 300, 100):
        exact.update(x[start : start + 100], y[start : start + 100])
        sgais.update(x[start : start + 100], y[start : start + 100])
    query = [[0.5, 0.5], [-1.0, 2.0]]
    want, got = exact.predict(query), sgais.predict(query)
    # Posterior sd of the mean at these points is ~0.1; 256 particles put the Monte Carlo error
    # near 0.1/16, and the predictive variance is dominated by σ² = 1.
    assert torch.allclose(got.mean, want.mean, atol=0.05)
    assert torch.allclose(got.variance, want.variance, rtol=0.05)
