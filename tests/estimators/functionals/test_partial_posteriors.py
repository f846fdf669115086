"""Paths of partial posteriors: unbiased against exact conjugate posterior expectations, and the
expected number of rows read grows like N^(1−α)."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.functionals.partial_posteriors import (
    ConjugatePath,
    ParticlePath,
    debiased_expectation,
    expected_rows,
    path_runner,
    random_subset,
    subset_sizes,
    truncation_probabilities,
)
from modelcompare.estimators.functionals.posterior_functionals import (
    Functional,
    conjugate_expectation,
)
from modelcompare.models import BetaBernoulli, LogisticRegression
from modelcompare.models.gamma_poisson import sample_log_gamma

Z_LIMIT = 4.0  # |z| beyond 4 has probability 6e-5 per coordinate under the null


def full_posterior(model, x, y, functional: Functional) -> torch.Tensor:
    return conjugate_expectation(model, model.update_stats(model.prior_stats(), x, y), functional)


def z_scores(estimate, exact: torch.Tensor) -> torch.Tensor:
    return (estimate.estimate - exact) / estimate.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mean", "second_moment", "predictive"])
def test_linear_regression_is_unbiased(stream, kind: str) -> None:
    model, x, y = stream("linear_regression", 2000, 0)
    functional = Functional(kind, x[:4] if kind == "predictive" else None)
    exact = full_posterior(model, x, y, functional)
    result = debiased_expectation(
        ConjugatePath(model),
        Rows(x, y),
        functional,
        torch.Generator().manual_seed(11),
        repetitions=400,
    )
    assert result.estimate.shape == exact.shape
    assert bool((result.stderr > 0).all())
    assert z_scores(result, exact).abs().max() < Z_LIMIT, (result.estimate, exact)


@pytest.mark.parametrize("kind", ["mean", "second_moment", "predictive"])
def test_beta_bernoulli_is_unbiased(stream, kind: str) -> None:
    model, _, y = stream("beta_bernoulli", 2000, 1)
    functional = Functional(kind)
    exact = full_posterior(model, None, y, functional)
    result = debiased_expectation(
        ConjugatePath(model),
        Rows(None, y),
        functional,
        torch.Generator().manual_seed(12),
        repetitions=600,
    )
    assert z_scores(result, exact).abs().max() < Z_LIMIT, (result.estimate, exact)


def test_a_path_that_stops_short_of_the_full_data_is_caught() -> None:
    """The check above can fail: a path ending at a subset (a biased estimator) is caught, on a
    stream whose rate drifts from 0.2 to 0.5 halfway."""
    g = torch.Generator().manual_seed(7)
    rate = torch.cat([torch.full((1000,), 0.2), torch.full((1000,), 0.5)]).to(torch.float64)
    y = (torch.rand(2000, generator=g, dtype=torch.float64) < rate).to(torch.float64)
    model, functional = BetaBernoulli(), Functional("mean")
    exact = full_posterior(model, None, y, functional)
    first_half = debiased_expectation(
        ConjugatePath(model),
        Rows(None, y[:1000]),
        functional,
        torch.Generator().manual_seed(12),
        repetitions=300,
    )
    assert z_scores(first_half, exact).abs().max() > Z_LIMIT


@pytest.mark.parametrize(
    "family", ["linear_regression_unknown_noise", "beta_bernoulli", "gamma_poisson"]
)
def test_closed_form_moments_match_posterior_draws(stream, family: str) -> None:
    """The conjugate moments in unconstrained θ against draws of the exact posterior."""
    model, x, y = stream(family, 50, 2)
    stats = model.update_stats(model.prior_stats(), x, y)
    g = torch.Generator().manual_seed(3)
    draws = 200_000
    if family == "beta_bernoulli":  # logit p = log G₁ − log G₂
        theta = (
            sample_log_gamma(float(stats["alpha"]), draws, g)
            - sample_log_gamma(float(stats["beta"]), draws, g)
        )[:, None]
    elif family == "gamma_poisson":
        theta = (sample_log_gamma(float(stats["shape"]), draws, g) - torch.log(stats["rate"]))[
            :, None
        ]
    else:  # ρ = 1/σ² ~ Gamma(a, b), β | ρ ~ N(μ, Λ⁻¹/ρ)
        log_rho = sample_log_gamma(float(stats["a"]), draws, g) - torch.log(stats["b"])
        cov = torch.linalg.inv(stats["precision"])
        mean = torch.linalg.solve(stats["precision"], stats["shift"])
        z = torch.randn(draws, mean.shape[0], generator=g, dtype=torch.float64)
        beta = mean + (z @ torch.linalg.cholesky(cov).T) * torch.exp(-0.5 * log_rho)[:, None]
        theta = torch.cat([beta, -log_rho[:, None]], 1)
    mean, var = model.posterior_moments(stats)
    sample_mean, sample_var = theta.mean(0), theta.var(0)
    assert ((sample_mean - mean).abs() / torch.sqrt(var / draws)).max() < Z_LIMIT
    assert torch.allclose(sample_var, var, rtol=0.02)


def test_subset_sizes_double_and_end_at_n() -> None:
    assert subset_sizes(100, 16) == [16, 32, 64, 100]
    assert subset_sizes(128, 16) == [16, 32, 64, 128]
    assert subset_sizes(5, 16) == [5]
    p = truncation_probabilities(4, 0.5)
    assert torch.allclose(
        p,
        torch.tensor([1, 2**-0.5, 2**-1, 2**-1.5], dtype=torch.float64)
        / (1 + 2**-0.5 + 2**-1 + 2**-1.5),
    )


@pytest.mark.slow
def test_expected_cost_grows_like_n_to_the_one_minus_alpha() -> None:
    """Rows read per repetition, counted, against N = 2^10 … 2^16: the log-log slope is 1 − α."""
    alpha, sizes, measured = 0.5, [2**10, 2**13, 2**16], []
    g = torch.Generator().manual_seed(5)
    model = BetaBernoulli()
    for n in sizes:
        y = (torch.rand(n, generator=g, dtype=torch.float64) < 0.4).to(torch.float64)
        result = debiased_expectation(
            ConjugatePath(model), Rows(None, y), Functional("mean"), g, repetitions=300, alpha=alpha
        )
        per_repetition = result.rows_used / result.repetitions
        # The count agrees with E[n_T] = Σ_t P(T = t) n_t (a z-test: n_T is heavy-tailed).
        levels = torch.tensor(subset_sizes(n, 16), dtype=torch.float64)
        p = truncation_probabilities(len(levels), alpha)
        sd = math.sqrt(float(p @ levels**2) - expected_rows(n, alpha, 16) ** 2)
        z = (per_repetition - expected_rows(n, alpha, 16)) / (sd / math.sqrt(300))
        assert abs(z) < Z_LIMIT
        measured.append(expected_rows(n, alpha, 16))
    slope = math.log(measured[-1] / measured[0]) / math.log(sizes[-1] / sizes[0])
    assert slope == pytest.approx(1.0 - alpha, abs=0.05)
    assert measured[-1] < 0.05 * sizes[-1]


def test_particle_path_is_close_to_exact_up_to_the_inner_estimator(stream) -> None:
    """Non-conjugate families use an estimator's particles per subset; on a conjugate model the
    result tracks the exact answer up to that inner approximation (a loose check)."""
    model, x, y = stream("linear_regression", 120, 4)
    functional = Functional("mean")
    exact = full_posterior(model, x, y, functional)
    runner = ParticlePath(model, "sgais", particles=32, hmc_moves=2)
    result = debiased_expectation(
        runner, Rows(x, y), functional, torch.Generator().manual_seed(6), repetitions=6, alpha=0.5
    )
    posterior_sd = torch.sqrt(
        model.posterior_moments(model.update_stats(model.prior_stats(), x, y))[1]
    )
    assert ((result.estimate - exact).abs() / (posterior_sd + result.stderr)).max() < 3.0


def test_bad_settings_raise() -> None:
    y = torch.ones(10, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="alpha"):
        debiased_expectation(
            ConjugatePath(BetaBernoulli()), Rows(None, y), Functional("mean"), g, alpha=1.0
        )
    with pytest.raises(ValueError, match="repetitions"):
        debiased_expectation(
            ConjugatePath(BetaBernoulli()), Rows(None, y), Functional("mean"), g, repetitions=0
        )
    with pytest.raises(ValueError, match="functional"):
        Functional("median")
    assert LogisticRegression(1).closed_form() is None  # so its paths use particles
    assert isinstance(path_runner(LogisticRegression(1), particles=8), ParticlePath)


def test_random_subset_is_distinct_and_uniform() -> None:
    g = torch.Generator().manual_seed(9)
    n, size, draws = 50, 10, 2000
    counts = torch.zeros(n)
    first = torch.zeros(n)
    for _ in range(draws):
        index = random_subset(n, size, g)
        assert index.unique().shape[0] == size and int(index.min()) >= 0 and int(index.max()) < n
        counts[index] += 1
        first[index[0]] += 1
    # Each index is in the subset with probability size/n and first with probability 1/n.
    expected, sd = draws * size / n, math.sqrt(draws * size / n * (1 - size / n))
    assert ((counts - expected).abs() / sd).max() < Z_LIMIT
    expected, sd = draws / n, math.sqrt(draws / n * (1 - 1 / n))
    assert ((first - expected).abs() / sd).max() < Z_LIMIT
