"""The Gaussian start (``gaussian_start``): a stream's first rows annealed in from the Laplace
approximation of their posterior. Where the posterior is Gaussian (linear regression with known
noise) the start is the posterior itself: one step, and log Ẑ is the exact log Z. Elsewhere it is
the same estimator along a shorter path, checked against Laplace importance sampling."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators import EstimatorError, OnlineEvidence, exact_log_evidence
from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.deadline import Deadline
from modelcompare.estimators.errors import BudgetExceeded
from modelcompare.estimators.online import gaussian_start, sgais
from modelcompare.estimators.online.gaussian_start import GaussianReference, laplace_reference
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.target import Piece, exact_target, past_data
from modelcompare.estimators.references.laplace_importance import LaplaceISSettings, run_laplace_is
from modelcompare.models import GaussianMixture, LinearRegression, LogisticRegression


def linear_rows(rows: int, inputs: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, inputs, generator=g, dtype=torch.float64)
    weights = torch.randn(inputs + 1, generator=g, dtype=torch.float64)
    noise = torch.randn(rows, generator=g, dtype=torch.float64)
    return x, x @ weights[:-1] + weights[-1] + noise


def logistic_rows(rows: int, inputs: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, inputs, generator=g, dtype=torch.float64)
    weights = torch.randn(inputs + 1, generator=g, dtype=torch.float64)
    return x, torch.bernoulli(torch.sigmoid(x @ weights[:-1] + weights[-1]), generator=g)


def test_a_gaussian_posterior_is_reached_in_one_step_with_the_exact_log_z() -> None:
    """The start covers the first update's 300 rows: a quarter of an exact phase of 1,200."""
    model = LinearRegression(10, noise_std=1.0, prior_std=1.0)
    x, y = linear_rows(300, 10, 0)
    tracker = OnlineEvidence(model, seed=0, start="laplace", full_batch_rows=1200)
    info = tracker.update(x, y)
    assert (info.sub_chunks, info.annealing_steps) == (1, 1)
    assert tracker.log_evidence == pytest.approx(exact_log_evidence(model, x, y), abs=1e-6)
    assert tracker.log_evidence_stderr < 1e-6  # every weight p(θ) p(y | θ) / q(θ) is Z
    # from the prior the schedule cuts the same rows into 10 pieces of longer ladders
    prior = OnlineEvidence(model, seed=0, full_batch_rows=1200).update(x, y)
    assert prior.sub_chunks == 10 and prior.annealing_steps > 20


def test_the_stream_goes_on_from_the_start_with_the_schedule() -> None:
    """The start covers a quarter of the exact phase (50 of its 200 rows); the rows after it are
    cut from where it ended; log Ẑ stays within 4 stderrs (those of the later pieces) of the
    exact value."""
    model = LinearRegression(10, noise_std=1.0, prior_std=1.0)
    x, y = linear_rows(600, 10, 1)
    tracker = OnlineEvidence(model, seed=1, start="laplace", full_batch_rows=200)
    first = tracker.update(x[:300], y[:300])
    # rows 0-50 from the start; then n / 4: 70, 90, 112, 140, 175, 218, 272, 300
    assert first.sub_chunks == 1 + 8
    tracker.update(x[300:], y[300:])
    error = tracker.log_evidence - exact_log_evidence(model, x, y)
    assert 0.0 < tracker.log_evidence_stderr < 1.0
    assert abs(error) < 4.0 * tracker.log_evidence_stderr


def test_a_model_of_more_than_44_parameters_starts_from_the_gaussian_by_default() -> None:
    """``start`` left unset is laplace past 44 parameters (``online.dimension``): a 60-parameter
    linear regression's exact phase is scaled to 682 rows, the start covers 171 of them, and a
    first update of 171 rows reaches the exact log Z in one step; at 44 parameters, and where the
    user asks for the prior, the schedule's pieces anneal from it."""
    large = LinearRegression(59, noise_std=1.0, prior_std=1.0)
    x, y = linear_rows(200, 59, 2)
    tracker = OnlineEvidence(large, seed=2)
    x, y = x[:171], y[:171]
    info = tracker.update(x, y)
    assert (info.sub_chunks, info.annealing_steps) == (1, 1)
    assert tracker.log_evidence == pytest.approx(exact_log_evidence(large, x, y), abs=1e-6)
    # from the prior, the schedule's pieces: 20 rows up to 100, then n / 4: 125, 156, 171
    assert OnlineEvidence(large, seed=2, start="prior").update(x, y).sub_chunks == 8
    small = LinearRegression(43, noise_std=1.0, prior_std=1.0)
    assert OnlineEvidence(small, seed=2).update(x[:, :43], y).sub_chunks == 8


@pytest.mark.parametrize("seed", [0, 1])
def test_a_logistic_posterior_is_reached_along_a_short_path(seed: int) -> None:
    model = LogisticRegression(4)
    x, y = logistic_rows(400, 4, seed)
    tracker = OnlineEvidence(model, seed=seed, start="laplace", full_batch_rows=1600)
    info = tracker.update(x, y)
    config = LaplaceISSettings(draws=4096, pilot_rows=50, starts=1)
    reference = run_laplace_is(model, Rows(x, y), config, torch.Generator().manual_seed(seed))
    stderr = math.hypot(tracker.log_evidence_stderr, reference.evidence.log_evidence_stderr)
    assert abs(tracker.log_evidence - reference.evidence.log_evidence) < 4.0 * stderr + 0.05
    # from the prior: 10 pieces and 34-41 steps (seeds 0-5)
    assert info.sub_chunks == 1 and info.annealing_steps <= 3


def test_without_a_mode_the_stream_starts_from_the_prior(monkeypatch: pytest.MonkeyPatch) -> None:
    """Newton failing from every start leaves the prior start, cut by the schedule, draw for
    draw (the fit draws no random numbers)."""
    calls = []

    def fails(*args: object) -> None:
        calls.append(1)
        raise EstimatorError("no mode")

    monkeypatch.setattr(gaussian_start, "find_mode", fails)
    model = LinearRegression(3)
    x, y = linear_rows(200, 3, 2)
    tracker = OnlineEvidence(model, seed=2, start="laplace")
    info = tracker.update(x, y)
    prior = OnlineEvidence(model, seed=2)
    assert info == prior.update(x, y) and tracker.log_evidence == prior.log_evidence
    assert len(calls) == gaussian_start.STARTS


def test_label_symmetric_models_always_start_from_the_prior() -> None:
    settings = SGAISSettings(start="laplace")
    assert sgais.kernel(GaussianMixture(2, 2), settings).start_rows == 0
    assert sgais.kernel(LinearRegression(3), settings).start_rows == 125  # 500 / 4
    assert sgais.kernel(LinearRegression(3), SGAISSettings()).start_rows == 0


@pytest.mark.parametrize(("full_batch_rows", "covered"), [(500, 125), (1830, 458), (3, 1)])
def test_the_start_covers_a_quarter_of_the_exact_phase_rounded_up(
    full_batch_rows: int, covered: int
) -> None:
    settings = SGAISSettings(start="laplace", full_batch_rows=full_batch_rows)
    assert sgais.kernel(LinearRegression(3), settings).start_rows == covered


def reference_of(dim: int, seed: int) -> GaussianReference:
    g = torch.Generator().manual_seed(seed)
    root = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    precision = root @ root.T + dim * torch.eye(dim, dtype=torch.float64)
    factor = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(precision)))
    return GaussianReference(torch.randn(dim, generator=g, dtype=torch.float64), precision, factor)


def test_the_reference_is_the_normal_of_its_mean_and_precision() -> None:
    reference = reference_of(5, 3)
    normal = torch.distributions.MultivariateNormal(reference.mean,
                                                    precision_matrix=reference.precision)
    theta = normal.sample((7,))
    assert torch.allclose(reference.log_density(theta), normal.log_prob(theta), atol=1e-10)
    draws = reference.sample(200_000, torch.Generator().manual_seed(4))
    covariance = torch.cov(draws.T)
    assert torch.allclose(covariance, normal.covariance_matrix, atol=0.01)


@pytest.mark.parametrize("temperature", [0.0, 0.3, 1.0])
def test_the_bridged_target_is_q_to_the_one_minus_lambda_times_the_posterior_to_lambda(
    temperature: float,
) -> None:
    """log π_λ = (1 − λ) log q + λ (log p(θ) + log p(piece | θ)) + log p(past | θ), and its
    gradient is that of the expression (autograd); the piece's tempered log-likelihood is
    log p(piece | θ) + log p(θ) − log q(θ)."""
    model = LinearRegression(4)
    x, y = linear_rows(60, 4, 5)
    reference = reference_of(5, 6)
    past = past_data(RowsHistory(Rows(x[:40], y[:40])), 500, 32, None)
    piece = Rows(x[40:], y[40:])
    target = exact_target(model, piece, temperature, past, torch.float64, reference)
    theta = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    tracked = theta.clone().requires_grad_()
    expected = ((1 - temperature) * reference.log_density(tracked)
                + temperature * (model.log_prior(tracked)
                                 + model.log_likelihood(tracked, piece.x, piece.y).sum(-1))
                + model.log_likelihood(tracked, x[:40], y[:40]).sum(-1))
    (gradient,) = torch.autograd.grad(expected.sum(), tracked)
    value, grad = target.value_and_grad(theta)
    assert torch.allclose(value, expected.detach(), atol=1e-9)
    assert torch.allclose(grad, gradient, atol=1e-9)
    assert torch.allclose(target.grad(theta), gradient, atol=1e-9)
    tempered = Piece(model, piece, past, reference).log_likelihood(theta)
    untempered = Piece(model, piece, past).log_likelihood(theta)
    assert torch.allclose(
        tempered, untempered + model.log_prior(theta) - reference.log_density(theta))


def test_the_reference_sits_at_the_posterior_mode_with_its_curvature() -> None:
    """For linear regression the Laplace approximation is the exact posterior."""
    model = LinearRegression(3, noise_std=1.0, prior_std=1.0)
    x, y = linear_rows(100, 3, 8)
    particles = model.sample_prior(16, torch.Generator().manual_seed(9))
    reference = laplace_reference(model, Rows(x, y), particles)
    assert reference is not None
    design = torch.cat([x, torch.ones(100, 1, dtype=torch.float64)], 1)
    precision = design.T @ design + torch.eye(4, dtype=torch.float64)
    assert torch.allclose(reference.precision, precision, rtol=1e-6)
    assert torch.allclose(reference.mean, torch.linalg.solve(precision, design.T @ y), atol=1e-8)


def test_the_fit_stops_at_the_update_budget() -> None:
    """Each Newton start checks the update's deadline (the fit is 2D + 1 gradient passes over up
    to ``full_batch_rows`` rows a step)."""
    model = LinearRegression(3)
    x, y = linear_rows(100, 3, 10)
    particles = model.sample_prior(16, torch.Generator().manual_seed(11))
    with pytest.raises(BudgetExceeded):
        laplace_reference(model, Rows(x, y), particles, Deadline.after(-1.0))
