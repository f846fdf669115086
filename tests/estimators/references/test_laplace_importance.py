"""Importance sampling from a Laplace proposal against exact evidence: linear regression (closed
form) and a Gaussian mixture (enumerating all K^n assignments), where the K! relabelings matter."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

import modelcompare.estimators.references.laplace_importance as laplace
from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.errors import EstimatorConfigError, EstimatorError
from modelcompare.estimators.references.laplace_importance import (
    LaplaceISSettings,
    StudentTProposal,
    find_mode,
    hessian,
    run_laplace_is,
)
from modelcompare.models import GaussianMixture, LinearRegression
from tests.estimators.mixture_oracle import exact_mixture_log_z, two_clusters

F64 = torch.float64


def regression_rows(rows: int, seed: int) -> Rows:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 3, generator=g, dtype=F64)
    return Rows(
        x,
        x @ torch.tensor([0.5, -1.0, 2.0], dtype=F64)
        + 0.3
        + torch.randn(rows, generator=g, dtype=F64),
    )


def test_mode_and_hessian_are_the_conjugate_posterior() -> None:
    model, rows = LinearRegression(3), regression_rows(300, 0)
    posterior = model.update_stats(model.prior_stats(), rows.x, rows.y)
    mean = torch.linalg.solve(posterior["precision"], posterior["shift"])
    mode = find_mode(model, rows, torch.zeros(4, dtype=F64), LaplaceISSettings())
    assert torch.allclose(mode.location, mean, atol=1e-8)
    # The log posterior is quadratic: central differences are exact up to rounding.
    assert torch.allclose(-hessian(model, mean, rows), posterior["precision"], rtol=1e-6)
    assert torch.allclose(mode.precision, posterior["precision"], rtol=1e-6)


def test_linear_regression_matches_the_closed_form() -> None:
    model, rows = LinearRegression(3), regression_rows(500, 1)
    result = run_laplace_is(
        model, rows, LaplaceISSettings(draws=2048), torch.Generator().manual_seed(2)
    )
    exact = float(model.batch_log_evidence(rows.x, rows.y))
    stderr = result.evidence.log_evidence_stderr
    assert 0.0 < stderr < 0.02
    assert abs(result.evidence.log_evidence - exact) < 4 * stderr
    assert result.pareto_k < 0.7 and result.ess > 0.5 * 2048


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_mixture_matches_enumeration_over_assignments(seed: int) -> None:
    x = two_clusters(12, 1, seed)
    exact = exact_mixture_log_z(x, 2)
    config = LaplaceISSettings(draws=8192, dof=4.0, scale=1.5)
    result = run_laplace_is(
        GaussianMixture(1, 2), Rows(x, None), config, torch.Generator().manual_seed(seed)
    )
    stderr = result.evidence.log_evidence_stderr
    assert 0.0 < stderr < 0.05
    assert abs(result.evidence.log_evidence - exact) < 4 * stderr


class OneLabeling(GaussianMixture):
    """The mixture with its relabelings hidden: the proposal covers one of the K! modes."""

    def relabelings(self, theta: torch.Tensor) -> torch.Tensor:
        return theta[None]


@pytest.mark.slow
def test_relabelings_count_every_mode() -> None:
    # Two well-separated clusters: the K! = 2 modes barely overlap, so a proposal on one of them
    # finds Z / 2, and the relabeled proposal the whole of Z.
    x = two_clusters(12, 1, 0)
    exact = exact_mixture_log_z(x, 2)
    config = LaplaceISSettings(draws=8192, dof=4.0, scale=1.5)
    one = run_laplace_is(OneLabeling(1, 2), Rows(x, None), config, torch.Generator().manual_seed(0))
    stderr = one.evidence.log_evidence_stderr
    assert abs(one.evidence.log_evidence - (exact - math.log(2))) < 4 * stderr + 0.01


@pytest.mark.slow
def test_proposal_density_is_the_relabeled_student_t() -> None:
    model = GaussianMixture(1, 2)
    x = two_clusters(12, 1, 0)
    config = LaplaceISSettings(dof=3.0, scale=1.3)
    # The mode as run_laplace_is finds it (Newton from pilot-AIS particles, not a prior draw).
    mode = run_laplace_is(model, Rows(x, None), config, torch.Generator().manual_seed(3)).mode
    proposal = StudentTProposal(model, mode, config)
    theta = proposal.sample(16, torch.Generator().manual_seed(4))
    covariance = config.scale**2 * torch.linalg.inv(mode.precision)
    t = stats.multivariate_t(mode.location.numpy(), covariance.numpy(), df=config.dof)
    copies = model.relabelings(theta).numpy()
    expected = special.logsumexp([t.logpdf(c) for c in copies], axis=0) - math.log(2)
    assert np.allclose(proposal.log_density(theta).numpy(), expected, rtol=1e-10)


def test_too_many_relabelings_is_an_error() -> None:
    x = two_clusters(12, 1, 0)
    with pytest.raises(EstimatorError, match="relabeled components"):
        run_laplace_is(
            GaussianMixture(1, 2),
            Rows(x, None),
            LaplaceISSettings(max_relabelings=1),
            torch.Generator().manual_seed(0),
        )


@pytest.mark.parametrize("field, value", [("draws", 1), ("dof", 0.0), ("scale", -1.0)])
def test_config_rejects_bad_values(field: str, value: float) -> None:
    with pytest.raises(EstimatorConfigError, match=field):
        LaplaceISSettings.parse({field: value})


def test_a_start_where_newton_fails_gives_way_to_the_next_pilot_particle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Newton fails from the first 5 pilot particles: the run still finds its `starts` modes
    from later ones, and its answer is the closed form's."""
    model, rows = LinearRegression(3), regression_rows(200, 1)
    calls: list[int] = []

    def flaky(*args: object) -> laplace.Mode:
        calls.append(1)
        if len(calls) <= 5:
            raise EstimatorError("Newton did not find the posterior mode in 100 steps")
        return find_mode(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(laplace, "find_mode", flaky)
    config = LaplaceISSettings(starts=2)
    result = run_laplace_is(model, rows, config, torch.Generator().manual_seed(0))
    assert len(calls) == 7  # five failures, then the two modes asked for
    exact = float(model.batch_log_evidence(rows.x, rows.y))
    assert abs(result.evidence.log_evidence - exact) < 4 * result.evidence.log_evidence_stderr
