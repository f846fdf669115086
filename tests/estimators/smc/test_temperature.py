"""ESS-adaptive tempering: the bisection hits its conditional-ESS target."""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators.smc.temperature import next_increment
from modelcompare.estimators.smc.weights import conditional_ess

M = 64


def setup(seed: int, spread: float) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    log_w = torch.log_softmax(torch.randn(M, generator=g, dtype=torch.float64), 0)
    # A chunk log-likelihood: offsets of tens to thousands of nats between particles.
    log_lik = -spread * torch.rand(M, generator=g, dtype=torch.float64) - 500.0
    return log_w, log_lik


@pytest.mark.parametrize("target", [0.3, 0.5, 0.8])
@pytest.mark.parametrize("spread", [30.0, 3000.0])
@pytest.mark.parametrize("remaining", [1.0, 0.4])
def test_bisection_hits_target(target: float, spread: float, remaining: float) -> None:
    log_w, log_lik = setup(int(spread) + int(100 * target), spread)
    assert conditional_ess(log_w, remaining * log_lik) / M < target  # the whole step is too far
    delta = next_increment(log_w, log_lik, remaining, target)
    assert 0.0 < delta < remaining
    # The bisection stops when |CESS/M − target| < tolerance (1e-4 by default).
    assert conditional_ess(log_w, delta * log_lik) / M == pytest.approx(target, abs=1e-4)


def test_returns_remaining_when_it_already_satisfies() -> None:
    log_w, log_lik = setup(0, 0.1)  # nearly flat likelihood: the rest of the way in one step
    assert conditional_ess(log_w, 0.7 * log_lik) / M >= 0.5
    assert next_increment(log_w, log_lik, 0.7, 0.5) == 0.7
    assert next_increment(log_w, torch.zeros(M, dtype=torch.float64), 1.0, 0.99) == 1.0


def test_increment_shrinks_as_the_target_rises() -> None:
    log_w, log_lik = setup(1, 300.0)
    deltas = [next_increment(log_w, log_lik, 1.0, t) for t in (0.2, 0.5, 0.9)]
    assert deltas[0] > deltas[1] > deltas[2] > 0.0


def test_particles_the_piece_rules_out_lose_their_weight_and_the_survivors_keep_the_target(
) -> None:
    """A quarter of the weight on particles 10³⁷ nats below the rest: every Δ > 0 takes the
    conditional ESS under 0.9; the survivors' conditional ESS is kept at it instead."""
    log_w, log_lik = setup(2, 300.0)
    out = torch.arange(M) % 4 == 0
    log_lik = torch.where(out, torch.full_like(log_lik, -5e37), log_lik)
    lost = float(torch.softmax(log_w, 0)[out].sum())
    delta = next_increment(log_w, log_lik, 1.0, 0.9)
    assert 0.0 < delta < 1.0
    survivors = conditional_ess(log_w[~out], delta * log_lik[~out]) / int((~out).sum())
    assert survivors == pytest.approx(0.9, abs=1e-4)
    assert conditional_ess(log_w, delta * log_lik) / M == pytest.approx((1 - lost) * 0.9, abs=1e-4)


def test_no_step_when_less_than_one_particles_worth_of_weight_survives() -> None:
    log_w = torch.log_softmax(torch.tensor([-30.0] + [0.0] * (M - 1), dtype=torch.float64), 0)
    log_lik = torch.full((M,), -5e37, dtype=torch.float64)
    log_lik[0] = -10.0  # the only particle the piece leaves a chance holds e⁻³⁰ of the weight
    assert next_increment(log_w, log_lik, 1.0, 0.5) == 0.0
