"""SG-AIS against the exact evidence, and its bookkeeping (log Z as a sum of step increments)."""

from __future__ import annotations

import math
import time

import pytest
import torch

from modelcompare.estimators import EstimatorError, OnlineEvidence, exact_log_evidence
from modelcompare.models import GaussianMixture, LinearRegression, LogisticRegression

SEEDS = range(8)
ROWS, POST = 300, 50

# Tolerances for SG-AIS vs exact at N = 300 (64 particles, default settings, 50-row POSTs).
# Measured (2026-11-22, tests/estimators/conftest.py streams; mean error / sd of errors /
# mean reported stderr, nats) under three successive defaults: an early one (ess_target 0.5,
# steps 10, 10-40 seeds), an intermediate one (ess_target 0.9, hmc_moves 2, 30 seeds) and the
# current one (ess_target 0.8, steps 20, hmc_moves 4, full_batch_rows 500; seeds 100-129):
#   linear_regression  −0.34..−0.42 / 0.35..0.58 / 0.50   −0.06 / 0.50 / 0.32   −0.06 / 0.37 / 0.39
#   beta_bernoulli     −0.09..+0.08 / 0.19..0.26 / 0.23   +0.05 / 0.23 / 0.18   −0.03 / 0.20 / 0.21
#   gamma_poisson      −0.08..+0.08 / 0.31..0.32 / 0.28   +0.04 / 0.22 / 0.19   −0.02 / 0.21 / 0.23
# SMC log-evidence estimates are biased low (Jensen) by about half their variance, and the
# finite-M particle approximation adds to that, hence a stated bias allowance per family (about
# twice the worst bias seen). The reported stderr has ranged from 0.65× to 1.2× the actual spread,
# so the per-seed check allows 4 stderrs (≈ 2.6 actual sd at worst). Checks: (a) the mean error
# over 8 seeds lies within the allowance plus 3 standard errors of that mean, sqrt(Σ se²)/8;
# (b) every seed lies within the allowance plus 4 of its own reported stderrs.
BIAS_ALLOWANCE = {"linear_regression": 0.75, "beta_bernoulli": 0.25, "gamma_poisson": 0.25}


def run(stream, family: str, seed: int, rows: int = ROWS, **config) -> tuple[OnlineEvidence, float]:
    model, x, y = stream(family, rows, seed)
    tracker = OnlineEvidence(model, seed=seed, **config)
    for start in range(0, rows, POST):
        tracker.update(None if x is None else x[start : start + POST], y[start : start + POST])
    return tracker, exact_log_evidence(model, x, y)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(BIAS_ALLOWANCE))
def test_matches_exact_evidence(stream, family: str) -> None:
    errors, stderrs = [], []
    for seed in SEEDS:
        tracker, exact = run(stream, family, seed)
        errors.append(tracker.log_evidence - exact)
        stderrs.append(tracker.log_evidence_stderr)
    allowance = BIAS_ALLOWANCE[family]
    mean_error = sum(errors) / len(errors)
    mean_stderr = math.sqrt(sum(s * s for s in stderrs)) / len(stderrs)
    report = ", ".join(f"{e:+.2f}±{s:.2f}" for e, s in zip(errors, stderrs, strict=True))
    assert abs(mean_error) <= allowance + 3.0 * mean_stderr, report
    for error, stderr in zip(errors, stderrs, strict=True):
        assert 0.0 < stderr < 5.0, report
        assert abs(error) <= allowance + 4.0 * stderr, report


def test_log_evidence_is_the_sum_of_increments(stream) -> None:
    model, x, y = stream("linear_regression", 240, 3)
    tracker = OnlineEvidence(model, seed=3)
    total, variance = 0.0, 0.0
    for start, stop in [(0, 7), (7, 100), (100, 101), (101, 240)]:
        info = tracker.update(x[start:stop], y[start:stop])
        total += info.log_evidence_increment
        variance += info.log_evidence_increment_variance
        assert info.rows == stop - start
        assert info.sub_chunks >= 1 and info.annealing_steps >= info.sub_chunks
        assert math.isfinite(info.log_evidence_increment) and info.log_evidence_increment < 0
        # Resampling is triggered below the threshold, so the final ESS is never below it.
        threshold = tracker.estimator.settings.resample_threshold
        assert threshold * 64 <= info.ess <= 64 + 1e-9
        assert 1.0 <= info.min_ess <= 64 + 1e-9
        assert tracker.n_observations == stop
    assert float(tracker.state.log_evidence) == pytest.approx(total, rel=1e-12)
    assert tracker.log_evidence_stderr == pytest.approx(math.sqrt(variance), rel=1e-12)
    # reported: log Ẑ + σ̂²/2 (``modelcompare.estimators.estimator.lognormal_log_evidence``)
    assert tracker.log_evidence == pytest.approx(total + variance / 2, rel=1e-12)
    state = tracker.state
    assert float(torch.logsumexp(state.log_weights, 0)) == pytest.approx(0.0, abs=1e-12)
    assert state.particles.shape == (64, model.param_dim)


def test_minibatch_moves_with_control_variates(stream) -> None:
    """Past the full-batch threshold the anchor's running gradient sum stays exact."""
    model, x, y = stream("linear_regression", 400, 4)
    tracker = OnlineEvidence(model, seed=4, full_batch_rows=40, batch_size=20)
    reanchors = 0
    for start in range(0, 400, 50):
        reanchors += tracker.update(x[start : start + 50], y[start : start + 50]).reanchors
    state = tracker.state
    rows = int(state.anchor.rows)
    assert 40 < rows <= 400 and reanchors >= 2  # set past 40 rows, re-set as n doubles
    assert 2 * rows > 350  # not due again: the last piece started at n = 350
    full = model.grad_log_likelihood(state.anchor.point[None], x, y)[0]
    torch.testing.assert_close(state.anchor.grad, full, rtol=1e-9, atol=1e-8)
    exact = exact_log_evidence(model, x, y)
    # Minibatch SGHMC on 40-row full batches is a cruder move than the default; still within a
    # few nats at N = 400 (5 stderrs plus the linear-regression allowance above).
    assert abs(tracker.log_evidence - exact) <= 0.75 + 5 * tracker.log_evidence_stderr


def test_plain_minibatch_gradients_keep_no_anchor(stream) -> None:
    tracker, _exact = run(
        stream, "linear_regression", 5, full_batch_rows=40, batch_size=20, control_variates=False
    )
    assert int(tracker.state.anchor.rows) == 0
    assert math.isfinite(tracker.log_evidence) and tracker.log_evidence < 0


@pytest.mark.parametrize("resampling", ["stratified", "residual", "multinomial"])
def test_other_resampling_schemes(stream, resampling: str) -> None:
    tracker, exact = run(stream, "beta_bernoulli", 6, resampling=resampling)
    assert abs(tracker.log_evidence - exact) <= 0.25 + 4.0 * tracker.log_evidence_stderr


@pytest.mark.parametrize("preconditioner", ["identity", "particles"])
def test_preconditioners(stream, preconditioner: str) -> None:
    tracker, exact = run(
        stream,
        "linear_regression",
        7,
        full_batch_rows=40,
        batch_size=20,
        preconditioner=preconditioner,
    )
    assert abs(tracker.log_evidence - exact) <= 0.75 + 5.0 * tracker.log_evidence_stderr


def test_a_pooled_mass_starts_after_the_exact_phase_and_follows_the_stream(stream) -> None:
    """With ``mass_clouds`` 4 the state holds no pool while the moves are exact HMC, then a D × D
    covariance carried from chunk to chunk: after several chunks it counts more samples than
    one cloud of M − 1 and at most 4 (M − 1); log Z stays within the usual bounds."""
    model, x, y = stream("linear_regression", ROWS, 7)
    tracker = OnlineEvidence(model, seed=7, particles=32, full_batch_rows=40, batch_size=20,
                             mass_clouds=4)
    samples = []
    for start in range(0, ROWS, POST):
        tracker.update(x[start : start + POST], y[start : start + POST])
        pool = tracker.state.mass
        if start == 0:  # every piece of the first 50 rows starts within the exact phase
            assert pool.covariance.numel() == 0
        else:
            assert pool.covariance.shape == (model.param_dim, model.param_dim)
            samples.append(1 / float(pool.inverse_samples))
    assert 31 < samples[-1] <= 4 * 31 + 1e-9
    exact = exact_log_evidence(model, x, y)
    assert abs(tracker.log_evidence - exact) <= 0.75 + 5.0 * tracker.log_evidence_stderr


def test_model_without_closed_form() -> None:
    g = torch.Generator().manual_seed(8)
    x = torch.randn(120, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (120,), generator=g).to(torch.float64)
    tracker = OnlineEvidence(LogisticRegression(3, classes=4), particles=32, seed=8)
    for start in range(0, 120, 40):
        tracker.update(x[start : start + 40], y[start : start + 40])
    # Labels independent of x: log Z is near 120·log(1/4) ≈ −166, minus an Occam penalty.
    assert -230.0 < tracker.log_evidence < -150.0
    probabilities = tracker.predict(x[:5]).probabilities
    torch.testing.assert_close(probabilities.sum(1), torch.ones(5, dtype=torch.float64))


@pytest.mark.slow
def test_density_model_without_targets() -> None:
    """A Gaussian mixture reads x only (no y): two well-separated clusters in 2-d."""
    g = torch.Generator().manual_seed(9)
    x = torch.cat(
        [
            torch.randn(150, 2, generator=g, dtype=torch.float64) - 3.0,
            torch.randn(150, 2, generator=g, dtype=torch.float64) + 3.0,
        ]
    )[torch.randperm(300, generator=g)]
    # Cheap settings: a smoke test of the x-only path, not an accuracy check.
    tracker = OnlineEvidence(GaussianMixture(2, 2), particles=16, seed=9, steps=5, ess_target=0.5)
    for start in range(0, 300, 100):
        info = tracker.update(x[start : start + 100])
        assert math.isfinite(info.log_evidence_increment)
    assert tracker.n_observations == 300
    # Unit-variance clusters: about −2.84 nats per point at best (2-d N(0, I) entropy + log 2).
    assert -1300.0 < tracker.log_evidence < -850.0
    assert tracker.predict(x[:3]).log_density.shape == (3,)


@pytest.mark.slow
def test_logistic_regression_survives_minibatch_moves() -> None:
    """4-class softmax regression with weights from the prior, past the full-batch phase."""
    g = torch.Generator().manual_seed(0)
    weights = torch.randn(4, 11, generator=g, dtype=torch.float64)
    x = torch.randn(750, 10, generator=g, dtype=torch.float64)
    probabilities = torch.softmax(x @ weights[:, :-1].T + weights[:, -1], 1)
    y = torch.multinomial(probabilities, 1, generator=g)[:, 0].to(torch.float64)
    tracker = OnlineEvidence(LogisticRegression(10, classes=4), seed=0, full_batch_rows=100)
    for start in range(0, 750, 250):
        tracker.update(x[start : start + 250], y[start : start + 250])
    assert float(tracker.state.particles.abs().max()) < 20.0  # prior scale 1, posterior tighter
    assert math.isfinite(tracker.log_evidence)


def test_a_chunk_no_particle_can_explain_fails_fast_and_changes_nothing() -> None:
    tracker = OnlineEvidence(LinearRegression(2), particles=16, seed=0)
    tracker.update([[0.1, 0.2]] * 20, [0.3] * 20)
    before = tracker.state_bytes()
    start = time.perf_counter()
    with pytest.raises(EstimatorError):
        tracker.update([[1e200, 1e200]] * 5, [1e200] * 5)
    assert time.perf_counter() - start < 5.0  # no crawl through the annealing-step cap
    assert tracker.state_bytes() == before
    assert tracker.n_observations == 20


def test_ess_of_the_state_matches_the_last_update() -> None:
    tracker = OnlineEvidence(LinearRegression(2), particles=32, seed=1)
    assert tracker.estimator.ess(tracker.state) == pytest.approx(32.0)
    info = tracker.update([[0.5, -0.2]] * 30, [1.0] * 30)
    assert tracker.estimator.ess(tracker.state) == pytest.approx(info.ess)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sgais", "sequential"])
def test_the_diverged_fraction_reports_sghmc_trajectories_undone(stream, method: str) -> None:
    """NaN while the moves are exact HMC; after the full-batch phase near 0 at the default
    learning rate, and most trajectories undone at one far too large for the posterior. The
    sequential peer moves with the same SGHMC and reports it too."""
    model, x, y = stream("linear_regression", 300, 0)
    healthy = OnlineEvidence(model, method=method, seed=0, full_batch_rows=100)
    reckless = OnlineEvidence(model, method=method, seed=0, full_batch_rows=100, lr=10.0)
    for start in range(0, 300, 100):
        rows = x[start : start + 100], y[start : start + 100]
        calm, wild = healthy.update(*rows), reckless.update(*rows)
        if start == 0:
            assert math.isnan(calm.diverged_fraction) and math.isnan(wild.diverged_fraction)
    assert calm.diverged_fraction < 0.01
    assert wild.diverged_fraction > 0.5


@pytest.mark.slow
def test_score_controls_apply_only_where_the_particles_fit_them(stream) -> None:
    """Softmax regression (44 parameters) needs 180 particles for the fit: at 64 its updates are
    bit for bit those of plain increments. Linear regression (4 here) takes them."""
    g = torch.Generator().manual_seed(0)
    weights = torch.randn(4, 11, generator=g, dtype=torch.float64)
    x = torch.randn(600, 10, generator=g, dtype=torch.float64)
    probabilities = torch.softmax(x @ weights[:, :-1].T + weights[:, -1], 1)
    y = torch.multinomial(probabilities, 1, generator=g)[:, 0].to(torch.float64)
    softmax = (LogisticRegression(10, classes=4), x, y)
    for (model, x, y), changed in ((softmax, False), (stream("linear_regression", 600, 0), True)):
        found = []
        for control in ("score", "none"):
            tracker = OnlineEvidence(model, seed=1, increment_control=control)
            for start in range(0, 600, 300):
                tracker.update(x[start : start + 300], y[start : start + 300])
            found.append((tracker.log_evidence, tracker.log_evidence_stderr))
        assert (found[0] != found[1]) == changed, model.family


@pytest.mark.slow
def test_score_controls_narrow_the_spread_over_engine_seeds(stream) -> None:
    """The same 1,500 rows under 10 engine seeds: log Ẑ varies less with the controls, and the
    stderr reports the narrower spread."""
    model, x, y = stream("linear_regression", 1500, 2)
    spread = {}
    for control in ("score", "none"):
        estimates, variances = [], []
        for seed in range(10):
            tracker = OnlineEvidence(model, seed=seed, increment_control=control)
            for start in range(0, 1500, 500):
                tracker.update(x[start : start + 500], y[start : start + 500])
            estimates.append(tracker.log_evidence)
            variances.append(tracker.log_evidence_stderr**2)
        mean = sum(estimates) / len(estimates)
        spread[control] = (
            sum((e - mean) ** 2 for e in estimates) / (len(estimates) - 1),
            sum(variances) / len(variances),
        )
    assert spread["score"][0] < spread["none"][0] and spread["score"][1] < spread["none"][1]
    # measured: between seeds 0.18 (plain 0.31), reported 0.15 (plain 0.21)
    assert spread["score"][1] == pytest.approx(spread["score"][0], rel=0.5)
