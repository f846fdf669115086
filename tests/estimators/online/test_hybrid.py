"""Hybrid (nested sampling on the first rows, SG-AIS after) against the exact evidence."""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators import (
    EstimatorConfigError,
    HybridSettings,
    InMemoryHistory,
    OnlineEvidence,
    ParticleState,
    Rows,
    build,
    exact_log_evidence,
    run_nested,
    state_from_bytes,
    state_to_bytes,
)
from modelcompare.estimators.data.history import ExtendedHistory
from modelcompare.estimators.data.serialization import leaves
from modelcompare.estimators.references.batch import equal_weight_samples
from modelcompare.models import LinearRegression


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    "family", ["linear_regression", "beta_bernoulli"]
)
@pytest.mark.slow
def test_matches_exact_evidence(stream, family: str) -> None:
    # 40-row POSTs: the nested phase re-runs at 40 and 80 rows and the third POST crosses
    # nested_rows = 100, so every path of ``update`` is taken. Measured over 15 seeds on these
    # data: mean error / sd / mean stderr = −0.20 / 0.41 / 0.48 (linear regression) and
    # +0.03 / 0.20 / 0.18 (Beta–Bernoulli), max |z| 2.6; allowance 0.5 nats + 4 stderrs.
    model, x, y = stream(family, 300, 3)
    tracker = OnlineEvidence(model, method="hybrid", particles=64, seed=1, live_points=64)
    for start in range(0, 300, 40):
        tracker.update(None if x is None else x[start : start + 40], y[start : start + 40])
    exact = exact_log_evidence(model, x, y)
    assert tracker.n_observations == 300
    assert 0.05 < tracker.log_evidence_stderr < 1.5
    assert abs(tracker.log_evidence - exact) < 0.5 + 4.0 * tracker.log_evidence_stderr


@pytest.mark.slow
def test_crossing_chunk_is_nested_then_sgais(stream) -> None:
    """A chunk crossing nested_rows: nested sampling on the rows up to it, its samples resampled
    to equal weights as SG-AIS's starting state, SG-AIS on the rest, one generator throughout."""
    model, x, y = stream("linear_regression", 150, 0)
    settings = dict(particles=32, live_points=32, nested_parallel=4, nested_rows=100)
    config = HybridSettings(**settings)
    hybrid = build(model, "hybrid", **settings)
    initial = hybrid.init(gen(0))
    state, info = hybrid.update(initial, Rows(x, y), InMemoryHistory(3), gen(7))

    generator = gen(7)
    head, tail = Rows(x[:100], y[:100]), Rows(x[100:], y[100:])
    nested = run_nested(model, head, config.nested, generator)
    particles, log_weights = equal_weight_samples(
        nested.particles, nested.log_weights, 32, generator
    )
    start = initial._replace(
        particles=particles,
        log_weights=log_weights,
        log_evidence=torch.tensor(nested.log_evidence, dtype=torch.float64),
        log_evidence_variance=torch.tensor(nested.log_evidence_stderr**2, dtype=torch.float64),
        n_observations=torch.tensor(100),
    )
    seen = ExtendedHistory(InMemoryHistory(3), head)
    sgais_settings = {
        k: v
        for k, v in settings.items()
        if k not in ("live_points", "nested_parallel", "nested_rows")
    }
    expected, _ = build(model, "sgais", **sgais_settings).update(start, tail, seen, generator)
    found = leaves(state)
    for field, value in leaves(expected).items():
        assert torch.equal(found[field], value), field
    assert hybrid.n_observations(state) == 150 and info.rows == 150
    assert info.nested_iterations == nested.iterations and info.annealing_steps > 0
    restored = state_from_bytes(ParticleState, state_to_bytes(state))
    back = leaves(restored)
    for field, value in leaves(state).items():
        assert torch.equal(back[field], value), field


def test_registry_builds_hybrid() -> None:
    estimator = build(LinearRegression(2), "hybrid", particles=32, nested_rows=50)
    assert estimator.method == "hybrid" and estimator.settings.nested_rows == 50


@pytest.mark.parametrize(
    "settings",
    [
        {"nested_rows": 0},
        {"live_points": 1},
        {"live_points": 8, "nested_parallel": 8},
        {"ess_target": 1.0},
        {"trajectories": 3},
    ],
    ids=lambda s: ",".join(map(str, s.items())),
)
def test_bad_settings_raise(settings: dict) -> None:
    with pytest.raises(EstimatorConfigError):
        build(LinearRegression(2), "hybrid", **settings)
