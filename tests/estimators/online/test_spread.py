"""The cloud's spread in units of the posterior's: about 1 for exact posterior draws of a
conjugate model, far below ``FROZEN`` for a cloud collapsed onto one point, above ``WIDE`` for
one wider than the posterior or split between two places, the update's
generator untouched, and which updates measure it."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators import OnlineEvidence
from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.online.spread import FROZEN, SPREAD_ROWS, WIDE, relative_spread
from modelcompare.models import LinearRegression

F64 = torch.float64


def posterior_draws(rows: int, particles: int) -> tuple[LinearRegression, torch.Tensor,
                                                          RowsHistory]:
    """Exact posterior draws of a Bayesian linear regression after ``rows`` rows."""
    model = LinearRegression(3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 3, generator=g, dtype=F64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=F64) + 0.3 + torch.randn(rows, generator=g,
                                                                          dtype=F64)
    stats = model.update_stats(model.prior_stats(), x, y)
    mean = torch.linalg.solve(stats["precision"], stats["shift"])
    lower = torch.linalg.cholesky(stats["precision"])
    z = torch.randn(particles, model.param_dim, generator=g, dtype=F64)
    # θ = μ + L⁻ᵀz has covariance (L Lᵀ)⁻¹ = Λ⁻¹
    draws = mean + torch.linalg.solve_triangular(lower.T, z.T, upper=True).T
    return model, draws, RowsHistory(Rows(x, y))


def test_exact_posterior_draws_have_a_spread_near_one() -> None:
    model, draws, seen = posterior_draws(2000, 4000)
    equal = torch.full((4000,), -torch.log(torch.tensor(4000.0, dtype=F64)), dtype=F64)
    for seed in range(6):
        spread = relative_spread(model, draws, equal, seen, torch.Generator().manual_seed(seed))
        # E = 1 − (the prior's share of the precision, 1/2000 here); a row's term (xᵀu)²ε² has
        # relative SD √(E x⁴ E ε⁴ − 1) = √8, so 256 rows over 4 directions leave about
        # √8 / 16 / 2 ≈ 0.09: these bounds are 3 of those
        assert 0.7 < spread < 1.3


def test_a_collapsed_cloud_is_frozen() -> None:
    model, draws, seen = posterior_draws(2000, 64)
    g = torch.Generator().manual_seed(1)
    collapsed = draws[0] + 1e-9 * torch.randn(64, model.param_dim, generator=g, dtype=F64)
    equal = torch.full((64,), -torch.log(torch.tensor(64.0, dtype=F64)), dtype=F64)
    spread = relative_spread(model, collapsed, equal, seen, torch.Generator().manual_seed(0))
    assert spread < FROZEN * 1e-6
    # the weights count: one heavy particle among spread ones is a collapse too
    heavy = torch.full((64,), -1e3, dtype=F64)
    heavy[5] = 0.0
    assert relative_spread(model, draws, heavy, seen, torch.Generator().manual_seed(0)) < FROZEN


def test_a_cloud_wider_than_the_posterior_is_wide() -> None:
    model, draws, seen = posterior_draws(2000, 4000)
    equal = torch.full((4000,), -torch.log(torch.tensor(4000.0, dtype=F64)), dtype=F64)
    centre = draws.mean(0)
    # three times the posterior's standard deviation: a spread of about 9
    tripled = centre + 3.0 * (draws - centre)
    assert relative_spread(model, tripled, equal, seen, torch.Generator().manual_seed(0)) > WIDE
    # twice: about 4, the border; 1.5 times: about 2.25, not wide
    widened = centre + 1.5 * (draws - centre)
    assert relative_spread(model, widened, equal, seen, torch.Generator().manual_seed(0)) < WIDE
    # a cloud split between the posterior and a place five posterior widths off in each
    # direction (a mode the moves left some particles in) reads wide, each half being narrow
    offset = torch.linalg.solve_triangular(
        torch.linalg.cholesky(model.update_stats(model.prior_stats(), seen.rows.x,
                                                 seen.rows.y)["precision"]).T,
        torch.full((model.param_dim, 1), 5.0, dtype=F64), upper=True).T
    split = torch.where(torch.arange(4000)[:, None] < 2000, draws, draws + offset)
    assert relative_spread(model, split, equal, seen, torch.Generator().manual_seed(0)) > WIDE


def test_the_update_generator_is_not_drawn_from() -> None:
    model, draws, seen = posterior_draws(500, 64)
    equal = torch.full((64,), -torch.log(torch.tensor(64.0, dtype=F64)), dtype=F64)
    generator = torch.Generator().manual_seed(7)
    before = generator.get_state()
    relative_spread(model, draws, equal, seen, generator)
    assert torch.equal(generator.get_state(), before)


@pytest.mark.slow
def test_updates_measure_it_past_each_multiple_of_spread_rows_or_while_a_re_estimate_can_come(
) -> None:
    """Without re-estimates only the updates whose rows cross a multiple of ``SPREAD_ROWS``
    measure the spread (NaN on the others and while the moves are exact); with them every
    update after the exact phase does while n ≤ ``reestimate_max_rows``, since their trigger reads
    it, and past that only those that cross a multiple again. A cloud that follows the
    posterior reads near 1."""
    model = LinearRegression(3)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4500, 3, generator=g, dtype=F64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=F64) + torch.randn(4500, generator=g, dtype=F64)
    trackers = {
        "plain": OnlineEvidence(model, seed=2, full_batch_rows=100, reestimate_growth=0.0),
        "restarting": OnlineEvidence(model, seed=2, full_batch_rows=100),
        "capped": OnlineEvidence(model, seed=2, full_batch_rows=100, reestimate_max_rows=2500),
    }
    measured: dict[str, list[int]] = {name: [] for name in trackers}
    for start in range(0, 4500, 500):
        for name, tracker in trackers.items():
            spread = tracker.update(x[start : start + 500], y[start : start + 500]).spread
            if not math.isnan(spread):
                measured[name].append(start + 500)
                # 64 correlated particles, after SGHMC: within a factor 2 of the posterior
                assert 0.5 < spread < 2
    assert SPREAD_ROWS == 2000
    assert measured["plain"] == [2000, 4000]  # the update of rows 0-500: exact moves
    assert measured["restarting"] == list(range(1000, 5000, 500))
    assert measured["capped"] == [1000, 1500, 2000, 2500, 4000]
