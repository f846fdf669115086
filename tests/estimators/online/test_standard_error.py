"""The variance rules of the piece kernel, on fake pieces with exact answers: ``genealogy``
starts from the Eves the state's slot carries (the particles themselves when it is empty) and
leaves there those of the next piece (the selection back to M's when the piece ended with one);
``delta`` sums the steps' delta-method variances and keeps no state."""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators.online import standard_error
from modelcompare.estimators.online.kernel import Annealed
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.state import GenealogyState, ParticleState, init
from modelcompare.estimators.smc.tempered import StepInfo
from modelcompare.models import LinearRegression

F64 = torch.float64
REWEIGHTED = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64))


def states() -> tuple[ParticleState, ParticleState]:
    """Four equally weighted particles before a piece, and after it (weights 0.1 … 0.4)."""
    before = init(LinearRegression(1), SGAISSettings(particles=4),
                  torch.Generator().manual_seed(0))
    return before, before._replace(log_weights=REWEIGHTED)


def annealed(selection: tuple[torch.Tensor, torch.Tensor] | None = None) -> Annealed:
    """A piece of one step, no resampling, reweighted to 0.1 … 0.4 (delta-method variance
    0.125)."""
    steps = (StepInfo(-1.0, 0.125, 3.3, False, (), REWEIGHTED, None),)
    return Annealed(torch.zeros(4, 2, dtype=F64), REWEIGHTED, steps, None, False, selection)


def test_genealogy_starts_from_the_particles_when_the_slot_is_empty() -> None:
    """Σ_e (M_e − W⁰_e)² = 0.15² + 0.05² + 0.05² + 0.15² = 0.05; the next piece's Eves are the
    particles after this one, with their weights."""
    before, after = states()
    variance, kept = standard_error.genealogy(before, after, annealed())
    assert variance == pytest.approx(0.05, abs=1e-12)
    assert torch.equal(kept.genealogy.eves, torch.arange(4))
    torch.testing.assert_close(kept.genealogy.eve_weights, REWEIGHTED.exp())
    assert float(kept.genealogy.lost_eves) == 0.0
    assert kept._replace(genealogy=after.genealogy) == after


def test_genealogy_starts_from_the_eves_the_slot_carries() -> None:
    """Two Eves of weight ½ (particles 0, 1 and 2, 3) and 0.01 lost: M = (0.3, 0.7), so
    (0.3 − 0.5)² + (0.7 − 0.5)² + 0.01 = 0.09."""
    before, after = states()
    before = before._replace(genealogy=GenealogyState(
        torch.tensor([0, 0, 1, 1]), torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=F64),
        torch.tensor(0.01, dtype=F64)))
    variance, _ = standard_error.genealogy(before, after, annealed())
    assert variance == pytest.approx(0.09, abs=1e-12)


def test_a_selection_back_to_m_leaves_the_eves_it_drew_from() -> None:
    """Four copies of particles 5, 0, 0, 5 of six: Eves 0 and 5 relabelled 0, 1 (labels 1, 0,
    0, 1), their weights padded to M with zeros, the four others' squared weights lost."""
    before, after = states()
    drawn_from = torch.log(torch.tensor([0.3, 0.1, 0.1, 0.1, 0.1, 0.3], dtype=F64))
    ancestors = torch.tensor([5, 0, 0, 5])
    _, kept = standard_error.genealogy(before, after, annealed((drawn_from, ancestors)))
    assert torch.equal(kept.genealogy.eves, torch.tensor([1, 0, 0, 1]))
    torch.testing.assert_close(kept.genealogy.eve_weights,
                               torch.tensor([0.3, 0.3, 0.0, 0.0], dtype=F64))
    assert float(kept.genealogy.lost_eves) == pytest.approx(0.04, abs=1e-12)


def test_delta_sums_the_steps_variances_and_keeps_no_state() -> None:
    before, after = states()
    piece = annealed()
    piece = piece._replace(steps=piece.steps * 3)
    variance, kept = standard_error.delta(before, after, piece)
    assert variance == pytest.approx(0.375, abs=1e-12) and kept is after
    assert standard_error.RULES["delta"] is standard_error.delta
    assert standard_error.RULES["genealogy"] is standard_error.genealogy
