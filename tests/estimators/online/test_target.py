"""The tempered target's minibatch gradient: fused kernels against the formula, and minibatches
drawn in one go that keep the law of separate draws."""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators.data.history import ExtendedHistory, InMemoryHistory, Rows
from modelcompare.estimators.online.target import (
    Piece,
    anchor_at,
    minibatch_grad_log_target,
    minibatch_gradients,
    minibatch_rows,
    past_data,
    sampled_strata,
    with_piece,
)
from modelcompare.models import LinearRegression, LogisticRegression, Model


def _history(model: Model, rows: int, generator: torch.Generator) -> tuple[Rows, Rows]:
    x = torch.randn(rows, 3, generator=generator, dtype=torch.float64)
    if isinstance(model, LogisticRegression):
        y = torch.randint(0, model.classes, (rows,), generator=generator).to(torch.float64)
    else:
        y = torch.randn(rows, generator=generator, dtype=torch.float64)
    return Rows(x[:-40], y[:-40]), Rows(x[-40:], y[-40:])


@pytest.mark.parametrize("model", [LinearRegression(3), LogisticRegression(3, classes=3)])
@pytest.mark.parametrize("temperature", [0.0, 0.35])
def test_fused_control_variate_gradient_is_the_formula(model: Model, temperature: float) -> None:
    """prior + λ Σ_piece ∇ℓ + Σ_all ∇ℓ(θ_a) + (n/|B|) Σ_B [∇ℓ_b(θ) − ∇ℓ_b(θ_a)]."""
    g = torch.Generator().manual_seed(3)
    past_rows, piece = _history(model, 240, g)
    history = InMemoryHistory(3)
    history.append(past_rows)
    theta = 0.3 * torch.randn(6, model.param_dim, generator=g, dtype=torch.float64)
    anchor = with_piece(model, anchor_at(model, theta.mean(0), history), piece)
    past = past_data(history, 50, 20, anchor)
    batch = history.sample(20, g)
    scale = len(history) / 20
    expected = (
        model.grad_log_prior(theta)
        + model.grad_log_likelihood(theta, piece.x, piece.y, temperature)
        + model.grad_log_likelihood(theta, batch.x, batch.y, scale)
        + anchor.grad_sum
        - model.grad_log_likelihood(anchor.point[None], batch.x, batch.y, scale)
    )
    fused = minibatch_grad_log_target(model, theta, piece, temperature, past, batch)
    torch.testing.assert_close(fused, expected, rtol=1e-10, atol=1e-9)


def test_minibatches_from_a_split_chunk_mix_past_and_absorbed_rows() -> None:
    """An ExtendedHistory draws from its past and its absorbed rows apart; cut in that order,
    a minibatch would hold only past or only absorbed rows, so it shuffles its draws
    (``History.sample``). Each minibatch must be a uniform draw: the number of absorbed rows
    per minibatch of 100 is Binomial(100, 0.1), mean 10 and variance 9."""
    past_rows = InMemoryHistory(None)
    past_rows.append(Rows(None, torch.zeros(900, dtype=torch.float64)))
    history = ExtendedHistory(past_rows, Rows(None, torch.ones(100, dtype=torch.float64)))
    rows = minibatch_rows(history, 100, 400, torch.Generator().manual_seed(0))
    counts = rows.y.reshape(400, 100).sum(1)
    assert abs(float(counts.mean()) - 10.0) < 0.6
    assert 6.0 < float(counts.var()) < 12.5


def test_a_piece_up_to_piece_batch_size_rows_is_summed_in_full() -> None:
    g = torch.Generator().manual_seed(4)
    model = LinearRegression(3)
    past_rows, piece = _history(model, 240, g)
    history = InMemoryHistory(3)
    history.append(past_rows)
    past = past_data(history, 50, 20, None)
    fixed, strata = sampled_strata(piece, 0.4, past, 40)
    assert len(fixed) == 1 and fixed[0][2] == 0.4 and [s.weight for s in strata] == [1.0]
    fixed, strata = sampled_strata(piece, 0.4, past, 39)
    assert fixed == [] and [(s.weight, s.batch_size) for s in strata] == [(0.4, 39), (1.0, 20)]
    assert strata[0].draw_weight == pytest.approx(0.4 * 40 / 39)
    assert sampled_strata(piece, 0.0, past, 39)[0] == []


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("model", [LinearRegression(3), LogisticRegression(3, classes=3)])
def test_a_piece_read_in_minibatches_keeps_the_gradient_unbiased(
    model: Model, dtype: torch.dtype
) -> None:
    """The mean of 4,000 steps' gradients (piece and past both in minibatches, control variates
    at θ_a; computed in ``dtype``) against prior + λ Σ_piece ∇ℓ + Σ_past ∇ℓ, computed in full
    in float64: within 4 standard errors of the mean in every coordinate."""
    g = torch.Generator().manual_seed(5)
    past_rows, piece = _history(model, 240, g)
    history = InMemoryHistory(3)
    history.append(past_rows)
    theta = 0.3 * torch.randn(2, model.param_dim, generator=g, dtype=torch.float64)
    anchor = with_piece(model, anchor_at(model, theta.mean(0) + 0.2, history), piece)
    past = past_data(history, 50, 20, anchor)
    fixed, strata = sampled_strata(piece, 0.7, past, 8)
    steps = 4000
    grads = minibatch_gradients(Piece(model, piece, past), fixed, strata, 0.7, steps, g, dtype)
    draws = torch.stack([grad(theta) for grad in grads])
    assert draws.dtype == torch.float64
    exact = (
        model.grad_log_prior(theta)
        + model.grad_log_likelihood(theta, piece.x, piece.y, 0.7)
        + model.grad_log_likelihood(theta, past_rows.x, past_rows.y)
    )
    standard_error = draws.std(0) / steps**0.5
    assert float(standard_error.min()) > 0.0
    assert float(((draws.mean(0) - exact) / standard_error).abs().max()) < 4.0
