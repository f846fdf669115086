"""A piece's parts step by step: the control-variate anchor follows the particles once their
mean drifts, the ladder turns careful after ``surprise_steps`` (or after the first step when it
predicts more), and on a stream with change points log Ẑ stays within its error bar of the exact
log Z (it read 3-4 stderr off before)."""

from __future__ import annotations

import math

import pytest
import torch

from modelcompare.estimators import OnlineEvidence, exact_log_evidence
from modelcompare.estimators.data.history import InMemoryHistory, Rows
from modelcompare.estimators.online import sgais
from modelcompare.estimators.online.particles import absorb, genealogy_variance, init
from modelcompare.estimators.online.piece_parts import PieceParts
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.target import Piece, anchor_at, past_data, with_piece
from modelcompare.estimators.smc.genealogy import Eves, eve_variance, first_generation
from modelcompare.estimators.smc.tempered import TemperedSMC, TemperedState
from modelcompare.models import LinearRegression

F64 = torch.float64


def setting(seed: int = 0) -> tuple[LinearRegression, InMemoryHistory, Rows]:
    g = torch.Generator().manual_seed(seed)
    model = LinearRegression(2)
    x = torch.randn(600, 2, generator=g, dtype=F64)
    y = x @ torch.tensor([1.0, -1.0], dtype=F64) + torch.randn(600, generator=g, dtype=F64)
    history = InMemoryHistory(2)
    history.append(Rows(x[:500], y[:500]))
    return model, history, Rows(x[500:], y[500:])


def recorder(made: list[tuple[str, Piece]], name: str) -> object:
    def parts(piece: Piece) -> TemperedSMC:
        made.append((name, piece))
        return TemperedSMC(piece.log_likelihood, lambda *_: 1.0, lambda *_: None, lambda *_: None)

    return parts


def cloud(centre: list[float], seed: int = 1) -> TemperedState:
    g = torch.Generator().manual_seed(seed)
    particles = torch.tensor(centre, dtype=F64) + 0.01 * torch.randn(64, 3, generator=g, dtype=F64)
    return TemperedState(particles, torch.full((64,), -math.log(64), dtype=F64), None, 0.5)


def test_the_anchor_follows_particles_that_drift_from_it() -> None:
    model, history, piece = setting()
    start = with_piece(model, anchor_at(model, torch.zeros(3, dtype=F64), history), piece)
    made: list[tuple[str, Piece]] = []
    parts = PieceParts(model, piece, past_data(history, 100, 50, start), recorder(made, "plain"),
                       anchor_drift=1.0)
    parts.refresh(cloud([0.0, 0.0, 0.001]))  # within one spread (0.01) of the anchor: kept
    assert not parts.moved and len(made) == 1
    drifted = cloud([0.0, 1.0, -1.0])
    parts.refresh(drifted)
    assert parts.moved and len(made) == 2
    anchor = made[-1][1].past.anchor
    assert anchor is parts.anchor and anchor is not None
    mean = drifted.particles.mean(0)
    expected = with_piece(model, anchor_at(model, mean, history), piece)
    torch.testing.assert_close(anchor.point, mean)
    torch.testing.assert_close(anchor.grad_sum, expected.grad_sum)
    assert anchor.piece_grad is not None and expected.piece_grad is not None
    torch.testing.assert_close(anchor.piece_grad, expected.piece_grad)


def test_the_steps_past_the_surprise_threshold_use_the_careful_parts() -> None:
    model, history, piece = setting()
    made: list[tuple[str, Piece]] = []
    parts = PieceParts(model, piece, past_data(history, 100, 50, None), recorder(made, "plain"),
                       anchor_drift=1.0, careful=(3, recorder(made, "careful")))
    for _ in range(5):
        parts.refresh(cloud([0.0, 0.0, 0.0]))
    assert [name for name, _ in made] == ["plain", "careful"]  # built once, at the third step
    assert parts.current is not parts.first


def test_a_first_step_that_predicts_a_long_ladder_turns_careful_at_once() -> None:
    """With careful parts after 3 steps, a first step that reaches λ₁ = 0.2 predicts 5 steps
    (1/λ₁ > 3): the careful parts take over from the second step, built once. λ₁ = 0.4 (2.5
    steps) waits for the third."""
    model, history, piece = setting()
    for first, expected in ((0.2, ["plain", "careful"]), (0.4, ["plain"])):
        made: list[tuple[str, Piece]] = []
        parts = PieceParts(model, piece, past_data(history, 100, 50, None),
                           recorder(made, "plain"), anchor_drift=1.0,
                           careful=(3, recorder(made, "careful")))
        parts.refresh(cloud([0.0, 0.0, 0.0])._replace(temperature=first))
        assert [name for name, _ in made] == expected
        for _ in range(3):
            parts.refresh(cloud([0.0, 0.0, 0.0]))
        assert [name for name, _ in made] == ["plain", "careful"]


def test_the_first_careful_step_resamples_to_more_particles() -> None:
    """``widen`` is the selection of the first careful step only; the steps after it use the
    careful parts' own."""
    model, history, piece = setting()
    made: list[tuple[str, Piece]] = []

    def widen(*_: object) -> None:
        return None

    parts = PieceParts(model, piece, past_data(history, 100, 50, None), recorder(made, "plain"),
                       anchor_drift=1.0, careful=(2, recorder(made, "careful")), widen=widen)
    selections = [parts.refresh(cloud([0.0, 0.0, 0.0])).selection for _ in range(4)]
    assert selections[0] is not widen and selections[1] is widen
    assert selections[2] is not widen and selections[3] is not widen
    assert [name for name, _ in made] == ["plain", "careful", "careful"]


@pytest.mark.slow
def test_a_long_piece_runs_with_more_particles_and_ends_with_m() -> None:
    """A piece that turns careful is resampled up to ``surprise_particles`` × M for its careful
    steps and back to M at its end: the state keeps M particles and equal weights."""
    model = LinearRegression(5)
    settings = SGAISSettings(full_batch_rows=0, surprise_steps=2, surprise_particles=3)
    loop = sgais.loop(model, settings)
    x, y = drifting(1500, 1000, 0)
    history = InMemoryHistory(5)
    history.append(Rows(x[:1000], y[:1000]))
    g = torch.Generator().manual_seed(0)
    state = init(model, settings, g)
    state, _ = absorb(loop, state, Rows(x[:1000], y[:1000]), InMemoryHistory(5), g, None)
    sizes: list[int] = []
    move = loop.careful_parts

    def recording(piece: Piece) -> TemperedSMC:
        assert move is not None
        parts = move(piece)
        inner = parts.move

        def counted(particles: torch.Tensor, *args: object) -> object:
            sizes.append(particles.shape[0])
            return inner(particles, *args)  # type: ignore[arg-type]

        return parts._replace(move=counted)

    loop = loop._replace(careful_parts=recording)
    state, report = absorb(loop, state, Rows(x[1000:], y[1000:]), history, g, None)
    assert len(report.pieces[0].steps) > 2 and sizes and set(sizes) == {3 * 64}
    assert state.particles.shape == (64, 6) and state.log_weights.shape == (64,)
    torch.testing.assert_close(state.log_weights.exp().sum(), torch.tensor(1.0, dtype=F64))


@pytest.mark.slow
def test_the_piece_after_the_selection_back_to_m_counts_it() -> None:
    """The state keeps the Eves of the selection back to M (the 3M particles it drew from,
    relabelled over those it copied); the next piece's variance starts its genealogy there, and
    a piece after one that kept M particles throughout, at its own particles."""
    model = LinearRegression(5)
    settings = SGAISSettings(full_batch_rows=0, surprise_steps=2, surprise_particles=3)
    loop = sgais.loop(model, settings)
    x, y = drifting(1700, 1000, 0)
    history = InMemoryHistory(5)
    g = torch.Generator().manual_seed(0)
    state = init(model, settings, g)
    for begin, end in ((0, 1000), (1000, 1500)):
        state, report = absorb(loop, state, Rows(x[begin:end], y[begin:end]), history, g, None)
        history.append(Rows(x[begin:end], y[begin:end]))
    assert report.pieces[-1].steps[-1].reweighted_log_weights.shape == (3 * 64,)
    kept = int(state.eves.max()) + 1
    assert state.eves.shape == state.eve_weights.shape == (64,)
    assert torch.all(state.eve_weights[:kept] > 0) and torch.all(state.eve_weights[kept:] == 0)
    # 3M Eves, at most M of them copied: the rest carry the weight the cloud lost
    assert float(state.eve_weights.sum()) < 1 and float(state.lost_eves) > 0
    carried = Eves(state.eves, state.eve_weights, float(state.lost_eves))
    before = state
    loop = sgais.loop(model, SGAISSettings(full_batch_rows=0, surprise_particles=1))
    state, report = absorb(loop, state, Rows(x[1500:1600], y[1500:1600]), history, g, None)
    history.append(Rows(x[1500:1600], y[1500:1600]))
    ((_, variance, steps, *_),) = report.pieces
    assert variance == eve_variance(carried, steps)
    assert variance > eve_variance(first_generation(before.log_weights), steps)
    torch.testing.assert_close(state.eves, torch.arange(64))
    torch.testing.assert_close(state.eve_weights, state.log_weights.exp())
    after = state
    state, report = absorb(loop, state, Rows(x[1600:], y[1600:]), history, g, None)
    expected = eve_variance(first_generation(after.log_weights), report.pieces[0].steps)
    assert report.pieces[0].log_evidence_increment_variance == expected
    # a state stored before the fields existed (empty Eves) starts at its own particles too
    old = after._replace(eves=torch.zeros(0, dtype=torch.int64),
                         eve_weights=torch.zeros(0, dtype=F64))
    assert genealogy_variance(old, report.pieces[0].steps) == expected


def drifting(rows: int, change: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = wᵀx + b + N(0, 1) with (w, b) redrawn from the prior at row ``change``."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(2, 6, generator=g, dtype=F64)
    x = torch.randn(rows, 5, generator=g, dtype=F64)
    chosen = weights[(torch.arange(rows) >= change).long()]
    return x, (x * chosen[:, :-1]).sum(1) + chosen[:, -1] + torch.randn(rows, generator=g,
                                                                        dtype=F64)


@pytest.mark.slow
def test_log_z_holds_its_error_bar_across_a_change_point() -> None:
    """Before (one ladder and move length for every step, the anchor fixed within a piece) the
    same two streams read z = +2.9 and −4.0."""
    model = LinearRegression(5)
    for seed in (0, 1):
        x, y = drifting(2000, 1000, seed)
        tracker = OnlineEvidence(model, seed=seed)
        for start in range(0, 2000, 500):
            tracker.update(x[start : start + 500], y[start : start + 500])
        error = tracker.log_evidence - exact_log_evidence(model, x, y)
        assert abs(error) < 2.5 * tracker.log_evidence_stderr, (seed, error)


@pytest.mark.slow
def test_the_careful_parts_wait_for_the_end_of_the_exact_phase() -> None:
    """Pieces annealed while the past is used in full leave the prior and take long ladders by
    nature; there the careful parts (more steps of particle-preconditioned moves) biased
    logistic regression's log Ẑ upwards, so only later pieces use them."""
    model = LinearRegression(5)
    settings = SGAISSettings(particles=32, surprise_steps=1, full_batch_rows=500)
    plain = sgais.loop(model, settings)
    assert plain.careful_parts is not None
    careful_pasts: list[int] = []

    def careful(piece: Piece) -> TemperedSMC:
        careful_pasts.append(len(piece.past.history))
        assert plain.careful_parts is not None
        return plain.careful_parts(piece)

    loop = plain._replace(careful_parts=careful)
    x, y = drifting(1200, 600, seed=3)
    generator = torch.Generator().manual_seed(3)
    state, history, long_exact_pieces = init(model, settings, generator), InMemoryHistory(5), 0
    for start in range(0, 1200, 400):
        chunk = Rows(x[start : start + 400], y[start : start + 400])
        exact_phase = len(history) <= settings.full_batch_rows
        state, report = absorb(loop, state, chunk, history, generator, None)
        long_exact_pieces += exact_phase * sum(len(r.steps) > 1 for r in report.pieces)
        history.append(chunk)
    assert long_exact_pieces > 0  # the exact phase had long ladders, and kept its parts
    assert careful_pasts and min(careful_pasts) > settings.full_batch_rows
