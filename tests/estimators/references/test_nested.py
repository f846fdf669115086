"""Nested sampling against the exact evidence: exact (rejection) NS on tiny data, reflective-HMC
NS on linear regression; the constrained move's invariance; the Estimator protocol."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import ks_2samp

from modelcompare.estimators import (
    BatchState,
    EstimatorConfigError,
    InMemoryHistory,
    NestedSettings,
    Rows,
    build,
    exact_log_evidence,
    run_nested,
    run_rejection_nested,
    state_from_bytes,
    state_to_bytes,
)
from modelcompare.estimators.moves.constrained import Contour, MoveReport, reflective_hmc, rejection
from modelcompare.estimators.moves.hmc import HMCParams
from modelcompare.estimators.references.batch import (
    full_log_likelihood,
    full_log_likelihood_and_grad,
)
from modelcompare.estimators.smc.covariance import particle_scale
from modelcompare.models import LinearRegression


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["beta_bernoulli", "linear_regression"])
def test_rejection_nested_matches_exact(stream, family: str) -> None:
    # Exact NS: its only error is the shrinkage noise its stderr describes. Measured over 30
    # generator seeds on these data (2026-11-22): z = error / stderr had mean −0.14, sd 0.96
    # (Beta–Bernoulli) and +0.07, sd 1.05 (linear regression), max |z| 3.2; 4 stderrs for one
    # fixed seed.
    model, x, y = stream(family, 10, 1)
    result = run_rejection_nested(model, Rows(x, y), 100, gen(0))
    exact = exact_log_evidence(model, x, y)
    assert 0.01 < result.log_evidence_stderr < 0.5
    assert abs(result.log_evidence - exact) < 4.0 * result.log_evidence_stderr
    assert result.particles.shape[0] == result.iterations + 100
    assert float(torch.logsumexp(result.log_weights, 0)) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("rows", [30, 300])
def test_reflective_nested_matches_exact_on_linear_regression(stream, rows: int) -> None:
    # Measured over 20 generator seeds on these data: z = error / stderr had mean +0.25, sd 1.12
    # (30 rows) and +0.23, sd 0.96 (300 rows), max |z| 2.1: the moves leave no visible bias.
    model, x, y = stream("linear_regression", rows, 2)
    config = NestedSettings(live_points=64, parallel=8)
    result = run_nested(model, Rows(x, y), config, gen(rows))
    exact = exact_log_evidence(model, x, y)
    assert 0.1 < result.log_evidence_stderr < 1.5
    assert abs(result.log_evidence - exact) < 4.0 * result.log_evidence_stderr
    assert 0.5 < result.acceptance_rate <= 1.0


def test_reflective_move_keeps_the_constrained_prior() -> None:
    """Start from exact draws of the prior restricted to log L > L* (rejection); one reflective
    HMC trajectory must leave that distribution unchanged (KS test per coordinate and on log L
    against fresh exact draws), while moving the points."""
    g = gen(5)
    x = torch.randn(20, 2, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -0.5], dtype=torch.float64) + torch.randn(20, generator=g).double()
    model, rows = LinearRegression(2), Rows(x, y)

    def log_lik(theta: torch.Tensor) -> torch.Tensor:
        return full_log_likelihood(model, theta, rows)

    def log_lik_and_grad(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return full_log_likelihood_and_grad(model, theta, rows)

    threshold = float(torch.quantile(log_lik(model.sample_prior(20000, g)), 0.98))
    report = MoveReport()
    contour = Contour(model, threshold, log_lik, log_lik_and_grad)
    reference, reference_ll = rejection(contour, 3000, g, report)
    start, start_ll = rejection(contour, 3000, g, report)
    scale = particle_scale(start, torch.zeros(3000, dtype=torch.float64))
    moved_report = MoveReport()
    moved, moved_ll = reflective_hmc(
        contour, start, start_ll, scale, HMCParams(0.3, 10, 1), g, moved_report
    )
    assert bool((moved_ll > threshold).all())
    assert torch.allclose(moved_ll, log_lik(moved))
    assert moved_report.reflections > 0 and moved_report.acceptance_rate > 0.8
    assert float((moved != start).any(-1).double().mean()) > 0.8
    for column in range(3):
        pvalue = ks_2samp(moved[:, column].numpy(), reference[:, column].numpy()).pvalue
        assert pvalue > 1e-3, (column, pvalue)
    assert ks_2samp(moved_ll.numpy(), reference_ll.numpy()).pvalue > 1e-3


@pytest.mark.slow
def test_update_equals_run_on_all_rows(stream) -> None:
    model, x, y = stream("linear_regression", 60, 4)
    config = NestedSettings(live_points=16, parallel=4, trajectories=1)
    estimator = build(model, "nested", live_points=16, parallel=4, trajectories=1)
    history = InMemoryHistory(3)
    state = estimator.init(gen(0))
    state, _ = estimator.update(state, Rows(x[:40], y[:40]), history, gen(1))
    history.append(Rows(x[:40], y[:40]))
    state, info = estimator.update(state, Rows(x[40:], y[40:]), history, gen(2))
    direct = run_nested(model, Rows(x, y), config, gen(2))
    assert estimator.log_evidence(state) == direct.log_evidence
    assert estimator.log_evidence_variance(state) == pytest.approx(direct.log_evidence_stderr**2)
    assert estimator.n_observations(state) == 60 and info.rows == 20
    assert info.iterations == direct.iterations
    assert state.particles.shape == (16, 4) and estimator.ess(state) == pytest.approx(16)
    restored = state_from_bytes(BatchState, state_to_bytes(state))
    for field, value in state._asdict().items():
        assert torch.equal(getattr(restored, field), value)
    assert estimator.predict(state, x[:3]).mean.shape == (3,)


def test_registry_builds_nested() -> None:
    estimator = build(LinearRegression(2), "nested", live_points=48, hmc_step=0.5)
    assert estimator.method == "nested" and estimator.particles == 48
    assert estimator.settings == NestedSettings(live_points=48, hmc_step=0.5)


@pytest.mark.parametrize(
    "settings",
    [
        {"live_points": 1},
        {"live_points": 16, "parallel": 16},
        {"stop_fraction": 0.0},
        {"hmc_step": -1.0},
        {"leapfrog_steps": 0},
        {"trajectories": 1.5},
        {"max_iterations": 0},
        {"ess_target": 0.5},
        {"particles": 64},  # nested sampling has live points
    ],
    ids=lambda s: ",".join(map(str, s.items())),
)
def test_bad_settings_raise(settings: dict) -> None:
    with pytest.raises(EstimatorConfigError):
        build(LinearRegression(2), "nested", **settings)
