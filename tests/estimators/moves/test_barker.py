"""The correction distribution and the minibatch Barker test against exact answers."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.moves.barker import (
    barker_test,
    build_correction_table,
    correction_table,
    max_cdf_gap,
)

DELTAS = (-3.0, -1.0, 0.0, 0.5, 2.5)


@pytest.mark.slow
def test_correction_table_reproduces_the_logistic_cdf() -> None:
    table = correction_table()
    gap = max_cdf_gap(table)
    assert gap <= 1e-3, gap  # shifts any acceptance probability by at most this; measured 4.8e-6
    assert abs(float(table.probabilities.sum()) - 1.0) < 1e-12
    assert bool((table.probabilities >= 0).all())
    # N(0, 1) ⊛ C = logistic forces Var C = π²/3 − 1 and a zero mean.
    mean = float(table.probabilities @ table.values)
    variance = float(table.probabilities @ table.values**2) - mean**2
    assert abs(mean) < 1e-4  # measured −1.2e-5
    assert abs(variance - (math.pi**2 / 3 - 1)) < 1e-2


def test_max_cdf_gap_sees_a_bad_table() -> None:
    """The gap measure is not blind: a table fitted to a too-narrow support misses by far."""
    narrow = build_correction_table(points=21, half_width=1.0)
    assert max_cdf_gap(narrow) > 1e-2


def _column_terms(scale: float):
    """Row terms d_mi = scale · x_im: particle m reads its own column of x, so particles draw
    independent minibatch noise although they share the rows drawn."""

    def row_terms(active: torch.Tensor, rows: Rows) -> torch.Tensor:
        assert rows.x is not None
        return scale * rows.x[:, active].T.double()

    return row_terms


def _decisions(n: int, row_sd: float, per_delta: int, batch_size: int):
    """Barker decisions for known Δ; returns acceptance per Δ, rows read, variances."""
    g = torch.Generator().manual_seed(7)
    deltas = torch.tensor(DELTAS, dtype=torch.float64).repeat_interleave(per_delta)
    x = torch.randn(n, deltas.numel(), generator=g, dtype=torch.float32)
    exact = deltas - row_sd * x.double().sum(0)  # Δ = exact + Σ_i d_i
    data = RowsHistory(Rows(x, None))
    result = barker_test(exact, _column_terms(row_sd), data, batch_size, g)
    accept = result.accept.double().reshape(len(DELTAS), per_delta).mean(-1)
    return accept, result.rows, result.variance


def _check_barker_probability(accept: torch.Tensor, per_delta: int) -> None:
    for delta, rate in zip(DELTAS, accept.tolist(), strict=True):
        expected = 1.0 / (1.0 + math.exp(-delta))
        binomial_sd = math.sqrt(expected * (1 - expected) / per_delta)
        assert abs(rate - expected) <= 4 * binomial_sd, (delta, rate, expected)


@pytest.mark.slow
def test_minibatch_acceptance_matches_barker_probability() -> None:
    # n = 200 rows, per-row sd 0.03: Var Δ* = n² · 0.03² / b ≤ 1 needs b ≥ 36, reached in the
    # third stage (16 → 48 → 112 rows drawn) with no full pass.
    per_delta = 20_000
    accept, rows, variance = _decisions(200, 0.03, per_delta, batch_size=16)
    _check_barker_probability(accept, per_delta)
    assert bool((variance <= 1.0).all())
    assert bool((rows < 200).all())
    assert 36 <= float(rows.double().mean()) <= 112


@pytest.mark.slow
def test_full_pass_when_the_minibatch_cannot_reach_unit_variance() -> None:
    # Per-row sd 0.5: b would need 10,000 rows > n, so every test takes the exact sum.
    per_delta = 20_000
    accept, rows, variance = _decisions(200, 0.5, per_delta, batch_size=16)
    _check_barker_probability(accept, per_delta)
    assert bool((variance == 0.0).all())
    assert bool((rows >= 200).all()) and float(rows.double().mean()) <= 216  # 16 drawn, then all


def test_without_data_the_test_is_exact_barker() -> None:
    g = torch.Generator().manual_seed(3)
    exact = torch.full((40_000,), 1.2, dtype=torch.float64)
    empty = RowsHistory(Rows(torch.empty(0, 40_000), None))
    result = barker_test(exact, _column_terms(0.0), empty, 100, g)
    expected = 1.0 / (1.0 + math.exp(-1.2))
    assert abs(float(result.accept.double().mean()) - expected) <= 4 * math.sqrt(0.25 / 40_000)
    assert int(result.rows.sum()) == 0
