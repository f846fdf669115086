"""modelcompare.models.conformance: the built-in families and the example pass every check; models
broken in one way each are refused by the check for that way, with its reason; the statistics behind
the checks against exact answers."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from broken_models import (
    MISSING_CONSTANT,
    FailingLikelihood,
    UnnormalisedPrior,
    WidePrior,
    WrongGradient,
    WrongPredictShape,
)
from scipy import integrate, stats

from modelcompare.estimators.data.history import Rows
from modelcompare.models import (
    BetaBernoulli,
    GammaPoisson,
    GaussianMixture,
    LinearRegression,
    LinearRegressionUnknownNoise,
    LogisticRegression,
    Model,
    PoissonRegression,
)
from modelcompare.models.conformance import FALSE_ALARM_RATE, Outcome, check_model, critical_z
from modelcompare.models.conformance.contract import check_predict
from modelcompare.models.conformance.data import given_rows, synthetic_rows
from modelcompare.models.conformance.findings import Violation
from modelcompare.models.conformance.gradients import Difference, check_grad_log_likelihood
from modelcompare.models.conformance.prior import (
    check_prior_draws,
    check_prior_normalised,
    prior_log_mass,
    stein_statistics,
)

ROOT = Path(__file__).resolve().parents[2]
F64 = torch.float64


def outcomes(model_class: type, config: dict[str, Any]) -> dict[str, tuple[Outcome, str]]:
    return {f.check: (f.outcome, f.message) for f in check_model(model_class, config)}


def failures(model_class: type, config: dict[str, Any]) -> dict[str, str]:
    found = outcomes(model_class, config)
    return {check: message for check, (outcome, message) in found.items()
            if outcome is Outcome.FAIL}


@pytest.mark.slow
@pytest.mark.parametrize(("model_class", "config"), [
    (LinearRegression, {"dim": 2}),
    (LogisticRegression, {"dim": 2, "classes": 3}),
    (LinearRegression, {"dim": 0}),
    (PoissonRegression, {"dim": 1}),
    (LinearRegressionUnknownNoise, {"dim": 1}),
    (BetaBernoulli, {"alpha": 0.5, "beta": 3.0}),
    (GammaPoisson, {"shape": 0.3}),
])
def test_built_in_families_pass_every_check(model_class: type, config: dict[str, Any]) -> None:
    found = outcomes(model_class, config)
    assert {outcome for outcome, _ in found.values()} == {Outcome.PASS}, found
    assert len(found) == 14


@pytest.mark.slow
def test_the_student_t_example_passes_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "modelcompare-example-models" / "src"))
    example = importlib.import_module("modelcompare_example_models.student_t")
    found = outcomes(example.StudentTRegression, {"dim": 1})
    assert {outcome for outcome, _ in found.values()} == {Outcome.PASS}, found
    assert "Laplace importance sampling" in found["evidence"][1]


@pytest.mark.slow
@pytest.mark.parametrize(("model_class", "check", "reason"), [
    pytest.param(WidePrior, "prior draws match log_prior",
                 "sample_prior does not draw from exp(log_prior)", id="wide sampler"),
    pytest.param(UnnormalisedPrior, "log_prior is normalised", "lacks a normalising constant",
                 id="unnormalised prior"),
    pytest.param(WrongGradient, "likelihood gradients",
                 "is not the gradient of 0.5 × Σ_r log_likelihood", id="wrong gradient"),
    pytest.param(WrongPredictShape, "predict", "mean has shape (4, 64); expected (64,)",
                 id="wrong predict shape"),
])
def test_each_broken_model_is_refused_by_its_check_alone(
        model_class: type, check: str, reason: str) -> None:
    found = failures(model_class, {"dim": 2})
    assert list(found) == [check]
    assert reason in found[check]


def test_a_sampler_twice_as_wide_as_log_prior_is_refused(generator: torch.Generator) -> None:
    check_prior_draws(LinearRegression(2), generator)
    with pytest.raises(Violation, match=r"too wide, too narrow.*standard deviation 1\.9"):
        check_prior_draws(WidePrior(2), generator)


def test_a_wrong_gradient_is_refused_at_its_coordinate(generator: torch.Generator) -> None:
    rows, _ = synthetic_rows(LinearRegression(2), 16, generator)
    check_grad_log_likelihood(LinearRegression(2), rows, generator)
    # the bias is θ's last coordinate, 2
    with pytest.raises(Violation, match=r"grad_log_likelihood.*coordinate 2 it is (-?[0-9.]+) "
                       r"where central differences give"):
        check_grad_log_likelihood(WrongGradient(2), rows, generator)


def test_predict_must_average_over_particles(generator: torch.Generator) -> None:
    rows, _ = synthetic_rows(LinearRegression(2), 16, generator)
    check_predict(LinearRegression(2), rows, generator)
    with pytest.raises(Violation, match=r"\.mean has shape \(4, 16\); expected \(16,\)"):
        check_predict(WrongPredictShape(2), rows, generator)


def test_the_missing_constant_is_measured(generator: torch.Generator) -> None:
    """Three normal coordinates without −½ log 2π each: the mass is exp(3 × 0.919)."""
    log_mass, error = prior_log_mass(UnnormalisedPrior(2), generator)
    assert error < 0.01
    assert abs(log_mass - 3 * MISSING_CONSTANT) < critical_z(1) * error
    log_mass, error = prior_log_mass(LinearRegression(2), generator)
    assert abs(log_mass) < critical_z(1) * error
    with pytest.raises(Violation, match=r"integrates to exp\(2\.7"):
        check_prior_normalised(UnnormalisedPrior(2), generator)


def test_stein_statistics_of_a_wide_sampler_match_quadrature(generator: torch.Generator) -> None:
    """Draws of N(0, 2²) against the density of N(0, 1) (score −θ), test function tanh(θ/2):
    E[−θ tanh(θ/2) + sech²(θ/2)/2] under N(0, 4), by quadrature, within the reported error."""
    theta = 2.0 * torch.randn(4096, 1, generator=generator, dtype=F64)
    scale = torch.tensor([2.0], dtype=F64)
    found = stein_statistics(theta, -theta, torch.zeros(1, dtype=F64), scale)

    def integrand(t: float) -> float:
        bounded = math.tanh(t / 2)
        return (-t * bounded + 0.5 * (1 - bounded**2)) * stats.norm.pdf(t, scale=2)

    exact, _ = integrate.quad(integrand, -40.0, 40.0)
    error = float(found.cross_mean[0, 0] / found.cross_z[0, 0])
    assert abs(float(found.cross_mean[0, 0]) - exact) < 4 * error
    assert abs(float(found.score_mean[0])) < 4 * float(found.score_mean[0] / found.score_z[0])
    right = stein_statistics(theta / 2, -theta / 2, torch.zeros(1, dtype=F64), scale / 2)
    assert float(right.cross_z.abs().max()) < critical_z(2)


def test_the_threshold_splits_the_false_alarm_rate() -> None:
    """K two-sided tails at the threshold add up to the rate: K · erfc(z/√2) = α."""
    for statistics in (1, 12, 10_000):
        z = critical_z(statistics)
        assert statistics * math.erfc(z / math.sqrt(2)) == pytest.approx(FALSE_ALARM_RATE,
                                                                         rel=1e-9)


def test_central_differences_of_a_cubic(generator: torch.Generator) -> None:
    """Σ_j θ_j³ per row of weights: the gradient 3θ² exactly, per row and summed."""
    theta = torch.randn(3, 4, generator=generator, dtype=F64)
    weights = torch.tensor([1.0, -2.0], dtype=F64)
    difference = Difference(lambda t: (t**3).sum(-1, keepdim=True) * weights, theta)
    torch.testing.assert_close(difference.estimate, -3 * theta**2, rtol=1e-8, atol=1e-8)
    assert bool((difference.error < 1e-6).all())
    rows = Difference(lambda t: (t**3).sum(-1, keepdim=True) * weights, theta, per_row=True)
    torch.testing.assert_close(rows.estimate, 3 * theta[:, None] ** 2 * weights[:, None],
                               rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize(("model", "support"), [
    (LinearRegression(2), "normal with predict's mean and variance"),
    (PoissonRegression(2), "Poisson with predict's mean"),
    (LogisticRegression(2, classes=3), "predict's class probabilities"),
    (BetaBernoulli(), "predict's class probabilities"),
    (GaussianMixture(2, 2), "x ~ N(0, 1)"),
])
def test_synthetic_rows_are_in_the_support(model: Model, support: str,
                                           generator: torch.Generator) -> None:
    rows, description = synthetic_rows(model, 32, generator)
    assert support in description
    assert rows.count == 32
    model.validate_data(rows.x, rows.y)
    assert (rows.x is None) == (model.input_dim == 0)
    assert (rows.y is None) == (not model.has_target)


def test_synthetic_targets_do_not_need_a_working_predict(generator: torch.Generator) -> None:
    rows, description = synthetic_rows(WrongPredictShape(2), 16, generator)
    assert description.endswith("y ~ N(0, 1)")
    assert rows.y is not None and rows.y.shape == (16,)


def test_rows_the_model_refuses_are_reported() -> None:
    labels = Rows(torch.zeros(8, 1, dtype=F64), torch.full((8,), 5.0, dtype=F64))
    with pytest.raises(Violation, match=r"validate_data refused the rows given: .*labels"):
        given_rows(LogisticRegression(1), labels, 64)
    rows, description = given_rows(LogisticRegression(1), labels._replace(y=labels.y * 0), 4)
    assert rows.count == 4 and description == "the first 4 rows given"


def test_construction_failures_end_the_report() -> None:
    (found,) = check_model(LinearRegression, {})
    assert found.outcome is Outcome.FAIL and "--config" in found.message
    (found,) = check_model(dict, {})
    assert "is not a subclass of modelcompare.models.Model" in found.message
    (found,) = check_model(Model, {})
    assert "does not implement config, log_likelihood, log_prior, predict, sample_prior" in (
        found.message)


def test_an_exception_names_where_it_was_raised_and_skips_what_needs_it() -> None:
    found = outcomes(FailingLikelihood, {"dim": 1})
    outcome, message = found["likelihood shapes"]
    assert outcome is Outcome.FAIL
    assert "raised RuntimeError: the likelihood is not written yet" in message
    assert "broken_models.py" in message and "in log_likelihood" in message
    for check in ("likelihood gradients", "row gradients", "weighted sums", "state save/load",
                  "evidence"):
        assert found[check] == (Outcome.SKIP, "needs likelihood shapes to pass")
    assert found["predict"][0] is Outcome.PASS
