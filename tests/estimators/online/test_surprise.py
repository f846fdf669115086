"""Robustness to surprise: which pieces are surprising; on fake parts, that an unsurprising
piece is left as it is and a surprising one moved ``surprise_moves`` more times on the past and
the piece (the anchor re-set at its mean past the exact phase); and that SG-AIS re-anchors and
moves more after a change point while staying exact on average. (When the anchor counts as
drifted: test_kernel.)"""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators import OnlineEvidence, exact_log_evidence
from modelcompare.estimators.online.kernel import Annealed, PieceEnv
from modelcompare.estimators.online.settings import PastDataSettings, SGAISSettings
from modelcompare.estimators.online.surprise import surprise_moves, surprising
from modelcompare.estimators.online.target import Piece, anchor_at, with_piece
from modelcompare.estimators.smc.tempered import StepInfo, TemperedSMC
from modelcompare.models import LinearRegression
from tests.estimators.online.fake_parts import F64, cloud, one_step, setting


def step(ess: float) -> StepInfo:
    return StepInfo(0.0, 0.0, ess, False, ())


def test_a_piece_is_surprising_by_its_ladder_length_or_its_ess() -> None:
    settings = SGAISSettings(surprise_steps=3, surprise_ess=0.1, surprise_moves=5)
    assert not surprising(settings, (step(50.0), step(40.0)), 64)
    assert not surprising(settings, tuple(step(50.0) for _ in range(3)), 64)
    assert surprising(settings, tuple(step(50.0) for _ in range(4)), 64)
    assert surprising(settings, (step(50.0), step(5.0)), 64)  # 5 < 0.1 · 64
    assert not surprising(settings, (step(50.0), step(6.5)), 64)


def moved_by_fake_parts(
    full_batch_rows: int, control_variates: bool = True
) -> tuple[Annealed, Annealed, Annealed, list[Piece], list[int]]:
    """A piece of 100 rows after 500, two surprise moves on parts that shift every coordinate
    by 0.5: (a piece of 2 steps at ESS 60, what that leaves, what a piece of 4 steps leaves),
    the pieces the parts were built for and the particles each move had."""
    model, history, rows = setting()
    built: list[Piece] = []
    moved: list[int] = []

    def parts(piece: Piece) -> TemperedSMC:
        built.append(piece)
        return one_step(piece, shift=0.5, moved=moved)

    (after,) = surprise_moves(SGAISSettings(surprise_steps=3, surprise_ess=0.1,
                                            surprise_moves=2))
    env = PieceEnv(model, rows, history, PastDataSettings(control_variates=control_variates),
                   full_batch_rows, parts, 64, torch.Generator().manual_seed(0), None, 0)
    arrived = cloud([1.0, -1.0, 0.0])
    weights = torch.log_softmax(torch.linspace(0.0, 1.0, 64, dtype=F64), 0)
    anchor = with_piece(model, anchor_at(model, torch.zeros(3, dtype=F64), history), rows)
    calm = Annealed(arrived.particles, weights, (step(60.0),) * 2, anchor, False)
    return calm, after(env, calm), after(env, calm._replace(steps=(step(60.0),) * 4)), built, \
        moved


def test_no_surprise_moves_are_made_when_they_are_off() -> None:
    assert surprise_moves(SGAISSettings(surprise_moves=0)) == ()


def test_an_unsurprising_piece_is_left_as_it_is() -> None:
    calm, after, _, _, _ = moved_by_fake_parts(100)
    assert after is calm


def test_a_surprising_piece_is_moved_again_and_re_anchored_at_its_mean() -> None:
    """Past the exact phase (500 rows read by minibatch with control variates): the parts are
    built once, on a past anchored at the arrived cloud's weighted mean with the piece's
    gradient, and move it twice (+0.5 each); weights and steps stay."""
    calm, _, surprised, built, moved = moved_by_fake_parts(100)
    model, history, rows = setting()
    (piece,) = built
    mean = torch.softmax(calm.log_weights, 0) @ calm.particles
    expected = with_piece(model, anchor_at(model, mean, history), rows)
    assert surprised.anchor is piece.past.anchor and surprised.anchor is not None
    torch.testing.assert_close(surprised.anchor.point, mean)
    torch.testing.assert_close(surprised.anchor.grad_sum, expected.grad_sum)
    torch.testing.assert_close(surprised.anchor.piece_grad, expected.piece_grad)
    assert moved == [64, 64] and surprised.extra_moves and surprised.reanchored
    torch.testing.assert_close(surprised.particles, calm.particles + 1.0)
    assert surprised.log_weights is calm.log_weights and len(surprised.steps) == 4


def test_a_surprising_piece_keeps_its_anchor_while_the_past_is_read_in_full() -> None:
    """In the exact phase (500 rows, full up to 500), or without control variates, the moves
    read the past without an anchor and the piece's anchor is left as it was."""
    for full_batch_rows, control_variates in ((500, True), (100, False)):
        calm, _, surprised, (piece,), moved = moved_by_fake_parts(full_batch_rows,
                                                                  control_variates)
        assert piece.past.anchor is None and moved == [64, 64]
        assert surprised.anchor is calm.anchor and not surprised.reanchored
        assert surprised.extra_moves
        torch.testing.assert_close(surprised.particles, calm.particles + 1.0)


def shifted(rows: int, change: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(2, 3, generator=g, dtype=F64) * torch.tensor([[1.0], [3.0]], dtype=F64)
    x = torch.randn(rows, 2, generator=g, dtype=F64)
    chosen = weights[(torch.arange(rows) >= change).long()]
    noise = torch.randn(rows, generator=g, dtype=F64)
    return x, (x * chosen[:, :-1]).sum(1) + chosen[:, -1] + noise


@pytest.mark.slow
def test_a_change_point_triggers_extra_moves_and_log_z_stays_exact() -> None:
    model = LinearRegression(2)
    x, y = shifted(1200, 700, 1)
    trackers = {
        moves: OnlineEvidence(model, seed=1, full_batch_rows=100, surprise_moves=moves)
        for moves in (0, 5)
    }
    surprises: dict[int, list[int]] = {moves: [] for moves in trackers}
    for start in range(0, 1200, 100):
        for moves, tracker in trackers.items():
            info = tracker.update(x[start : start + 100], y[start : start + 100])
            surprises[moves].append(info.surprises)
    exact = exact_log_evidence(model, x, y)
    # The chunk after the change is surprising; the i.i.d. chunks before it (past the first
    # ones, where the prior is far from the posterior) are not.
    assert surprises[5][7] == 1 and sum(surprises[5][2:7]) == 0
    assert sum(surprises[0]) == 0
    for tracker in trackers.values():
        assert abs(tracker.log_evidence - exact) < 4.0 * tracker.log_evidence_stderr + 0.75
