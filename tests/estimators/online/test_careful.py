"""The careful ladder: on fake parts, when a piece turns careful (at ``careful_steps``, or
after a first step that predicts a longer ladder), that its parts are built once, that the
first careful step alone resamples up to more particles, that it waits for the end of the exact
phase and that the piece ends back at M with its selection kept; on real streams, that a long
piece runs with more particles and ends with M, that the next piece's variance counts the
selection back to M, and that log Ẑ holds its error bar across a change point (it read 3-4
stderr off before)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import pydantic
import pytest
import torch

from modelcompare.estimators import OnlineEvidence, exact_log_evidence
from modelcompare.estimators.data.history import InMemoryHistory, Rows
from modelcompare.estimators.online import careful as careful_ladder
from modelcompare.estimators.online import sgais, standard_error
from modelcompare.estimators.online.careful import Careful, narrowing, step_rule, turns_careful
from modelcompare.estimators.online.kernel import (
    Annealed,
    Parts,
    PieceEnv,
    PieceKernel,
    StepPlan,
    absorb,
    next_plan,
)
from modelcompare.estimators.online.settings import PastDataSettings, SGAISSettings
from modelcompare.estimators.online.state import init
from modelcompare.estimators.online.target import Piece, past_data
from modelcompare.estimators.smc.genealogy import Eves, eve_variance, first_generation
from modelcompare.estimators.smc.relabeling import relabeler
from modelcompare.estimators.smc.resampling import RESAMPLERS, systematic
from modelcompare.estimators.smc.tempered import TemperedSMC
from modelcompare.models import LinearRegression
from tests.estimators.online.fake_parts import F64, cloud, keep, recorder, setting


def test_a_piece_turns_careful_at_its_step_or_after_a_first_step_predicting_more() -> None:
    """With careful parts after 3 steps: at step 3 whatever λ; at step 1 when λ₁ · 3 < 1."""
    assert turns_careful(3, 3, 0.9)
    assert turns_careful(3, 1, 0.2) and not turns_careful(3, 1, 0.4)
    assert not turns_careful(3, 2, 0.01) and not turns_careful(3, 4, 0.01)


def ladder(
    made: list[tuple[str, Piece]],
    after: int,
    temperatures: tuple[float, ...],
    particles: int = 1,
    full_batch_rows: int = 100,
) -> list[StepPlan]:
    """The plans of a piece's steps reaching ``temperatures`` on recording parts, careful
    after ``after`` steps (with ``particles`` × M particles)."""
    model, history, piece = setting()
    rule = step_rule(Careful(after, recorder(made, "careful"), particles, systematic))
    kernel = PieceKernel(model, PastDataSettings(), full_batch_rows, recorder(made, "plain"), 10,
                         standard_error.delta, step_rule=rule)
    env = PieceEnv(model, piece, history, kernel.past, full_batch_rows, kernel.parts, 64,
                   torch.Generator().manual_seed(0), None, 0)
    past = past_data(history, 100, 50, None)
    plan = StepPlan(kernel.parts, past, kernel.parts(Piece(model, piece, past)), 0, False, False,
                    rule.start(env))
    plans = []
    for temperature in temperatures:
        plan = next_plan(kernel, env, plan, cloud([0.0, 0.0, 0.0], temperature=temperature))
        plans.append(plan)
    return plans


def test_the_steps_past_careful_steps_use_the_careful_parts_built_once() -> None:
    made: list[tuple[str, Piece]] = []
    plans = ladder(made, 3, (0.5, 0.6, 0.7, 0.8, 0.9))
    assert [name for name, _ in made] == ["plain", "careful"]  # built once, at the third step
    assert plans[1].smc is not plans[2].smc and plans[2].smc is plans[4].smc


def test_a_first_step_that_predicts_a_long_ladder_turns_careful_at_once() -> None:
    """With careful parts after 3 steps, a first step that reaches λ₁ = 0.2 predicts 5 steps
    (1/λ₁ > 3): the careful parts take over from the second step, built once. λ₁ = 0.4 (2.5
    steps) waits for the third."""
    for first, expected in ((0.2, ["plain", "careful"]), (0.4, ["plain"])):
        made: list[tuple[str, Piece]] = []
        ladder(made, 3, (first,))
        assert [name for name, _ in made] == expected
        made.clear()
        ladder(made, 3, (first, 0.5, 0.5, 0.5))
        assert [name for name, _ in made] == ["plain", "careful"]


def test_the_first_careful_step_resamples_to_more_particles() -> None:
    """The first careful step's selection draws 3M particles with equal weights; the steps
    before and after it use the parts' own, the step after it the careful parts rebuilt."""
    made: list[tuple[str, Piece]] = []
    plans = ladder(made, 2, (0.5, 0.6, 0.7, 0.8), particles=3)
    own = [plan.smc.selection is keep for plan in plans]
    assert own == [True, False, True, True]
    assert [name for name, _ in made] == ["plain", "careful", "careful"]
    state = cloud([0.0, 0.0, 0.0])
    widened = plans[1].smc.selection(state.particles, state.log_weights, 64.0,
                                     torch.Generator().manual_seed(0))
    assert widened.resampled and widened.particles.shape == (192, 3)
    torch.testing.assert_close(widened.log_weights, torch.full((192,), -math.log(192), dtype=F64))


def test_the_careful_parts_are_not_used_while_the_past_is_read_in_full() -> None:
    """500 rows of past: a full phase up to 500 rows keeps the plain parts however long the
    ladder; one up to 499 turns careful."""
    made: list[tuple[str, Piece]] = []
    ladder(made, 1, (0.1, 0.2, 0.3), full_batch_rows=500)
    assert [name for name, _ in made] == ["plain"]
    made.clear()
    ladder(made, 1, (0.1, 0.2, 0.3), full_batch_rows=499)
    assert [name for name, _ in made] == ["plain", "careful"]


def test_a_widened_piece_is_narrowed_back_to_m_and_its_selection_kept() -> None:
    """12 particles narrowed to M = 4 by the careful resampler (here a fixed draw, fed the
    weights): equal weights, the drawn copies, and (the weights drawn from, the ancestors)."""
    drawn: list[tuple[torch.Tensor, int]] = []
    ancestors = torch.tensor([11, 0, 0, 5])

    def resampler(weights: torch.Tensor, generator: torch.Generator,
                  count: int | None = None) -> torch.Tensor:
        assert count is not None
        drawn.append((weights, count))
        return ancestors

    after = narrowing(Careful(2, recorder([], "careful"), 3, resampler))
    model, history, piece = setting()
    env = PieceEnv(model, piece, history, PastDataSettings(), 100, recorder([], "plain"), 4,
                   torch.Generator().manual_seed(0), None, 0)
    log_weights = torch.log_softmax(torch.arange(12, dtype=F64), 0)
    widened = Annealed(torch.arange(36, dtype=F64).reshape(12, 3), log_weights, (), None, False)
    narrowed = after(env, widened)
    ((weights, count),) = drawn
    assert count == 4
    torch.testing.assert_close(weights, log_weights.exp())
    torch.testing.assert_close(narrowed.particles, widened.particles[ancestors])
    torch.testing.assert_close(narrowed.log_weights, torch.full((4,), -math.log(4), dtype=F64))
    assert narrowed.selection is not None
    assert narrowed.selection[0] is log_weights and narrowed.selection[1] is ancestors
    at_m = widened._replace(particles=widened.particles[:4], log_weights=log_weights[:4])
    assert after(env, at_m) is at_m and len(drawn) == 1


def test_sgais_narrows_only_when_its_careful_steps_widen() -> None:
    model = LinearRegression(2)
    counts = {
        (particles, moves): len(sgais.kernel(model, SGAISSettings(
            careful_particles=particles, surprise_moves=moves)).after)
        for particles in (1, 4) for moves in (0, 5)
    }
    assert counts == {(1, 0): 0, (1, 5): 1, (4, 0): 1, (4, 5): 2}


def test_the_old_careful_names_still_validate_and_not_beside_the_new_ones() -> None:
    """Before the careful ladder had settings of its own it read ``surprise_*`` and turned at
    ``surprise_steps``: those map to ``careful_*``; an old name with its new one is refused."""
    old = SGAISSettings(surprise_ess_target=0.95, surprise_move_steps=30, surprise_particles=2,
                        surprise_steps=5)
    assert (old.careful_ess_target, old.careful_move_steps, old.careful_particles,
            old.careful_steps, old.surprise_steps) == (0.95, 30, 2, 5, 5)
    assert SGAISSettings(surprise_steps=5, careful_steps=3).careful_steps == 3
    with pytest.raises(pydantic.ValidationError,
                       match="surprise_particles is the old name of careful_particles"):
        SGAISSettings(surprise_particles=2, careful_particles=2)


def with_careful_parts(
    model: LinearRegression, settings: SGAISSettings, wrap: Callable[[Parts], Parts]
) -> PieceKernel:
    """SG-AIS's kernel whose careful parts are ``wrap`` of its own."""
    own = functools.partial(sgais.parts, settings.careful, relabeler(model))
    careful = Careful(settings.careful_steps, wrap(own), settings.careful_particles,
                      RESAMPLERS[settings.resampling])
    return sgais.kernel(model, settings)._replace(step_rule=careful_ladder.step_rule(careful))


def drifting(rows: int, change: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = wᵀx + b + N(0, 1) with (w, b) redrawn from the prior at row ``change``."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(2, 6, generator=g, dtype=F64)
    x = torch.randn(rows, 5, generator=g, dtype=F64)
    chosen = weights[(torch.arange(rows) >= change).long()]
    return x, (x * chosen[:, :-1]).sum(1) + chosen[:, -1] + torch.randn(rows, generator=g,
                                                                        dtype=F64)


@pytest.mark.slow
def test_a_long_piece_runs_with_more_particles_and_ends_with_m() -> None:
    """A piece that turns careful is resampled up to ``careful_particles`` × M for its careful
    steps and back to M at its end: the state keeps M particles and equal weights."""
    model = LinearRegression(5)
    settings = SGAISSettings(full_batch_rows=0, careful_steps=2, surprise_steps=2,
                             careful_particles=3)
    x, y = drifting(1500, 1000, 0)
    history = InMemoryHistory(5)
    history.append(Rows(x[:1000], y[:1000]))
    g = torch.Generator().manual_seed(0)
    state = init(model, settings, g)
    state, _ = absorb(sgais.kernel(model, settings), state, Rows(x[:1000], y[:1000]),
                      InMemoryHistory(5), g)
    sizes: list[int] = []

    def recording(own: Parts) -> Parts:
        def parts(piece: Piece) -> TemperedSMC:
            smc = own(piece)
            inner = smc.move

            def counted(particles: torch.Tensor, *args: object) -> object:
                sizes.append(particles.shape[0])
                return inner(particles, *args)  # type: ignore[arg-type]

            return smc._replace(move=counted)

        return parts

    kernel = with_careful_parts(model, settings, recording)
    state, report = absorb(kernel, state, Rows(x[1000:], y[1000:]), history, g)
    assert len(report.pieces[0].steps) > 2 and sizes and set(sizes) == {3 * 64}
    assert state.particles.shape == (64, 6) and state.log_weights.shape == (64,)
    torch.testing.assert_close(state.log_weights.exp().sum(), torch.tensor(1.0, dtype=F64))


@pytest.mark.slow
def test_the_piece_after_the_selection_back_to_m_counts_it() -> None:
    """The state's ``genealogy`` slot keeps the Eves of the selection back to M (the 3M
    particles it drew from, relabelled over those it copied); the next piece's variance starts
    its genealogy there, and a piece after one that kept M particles throughout, at its own
    particles."""
    model = LinearRegression(5)
    settings = SGAISSettings(full_batch_rows=0, careful_steps=2, surprise_steps=2,
                             careful_particles=3)
    kernel = sgais.kernel(model, settings)
    x, y = drifting(1700, 1000, 0)
    history = InMemoryHistory(5)
    g = torch.Generator().manual_seed(0)
    state = init(model, settings, g)
    for begin, end in ((0, 1000), (1000, 1500)):
        state, report = absorb(kernel, state, Rows(x[begin:end], y[begin:end]), history, g)
        history.append(Rows(x[begin:end], y[begin:end]))
    assert report.pieces[-1].steps[-1].reweighted_log_weights.shape == (3 * 64,)
    slot = state.genealogy
    kept = int(slot.eves.max()) + 1
    assert slot.eves.shape == slot.eve_weights.shape == (64,)
    assert torch.all(slot.eve_weights[:kept] > 0) and torch.all(slot.eve_weights[kept:] == 0)
    # 3M Eves, at most M of them copied: the rest carry the weight the cloud lost
    assert float(slot.eve_weights.sum()) < 1 and float(slot.lost_eves) > 0
    carried = Eves(slot.eves, slot.eve_weights, float(slot.lost_eves))
    before = state
    kernel = sgais.kernel(model, SGAISSettings(full_batch_rows=0, careful_particles=1))
    state, report = absorb(kernel, state, Rows(x[1500:1600], y[1500:1600]), history, g)
    history.append(Rows(x[1500:1600], y[1500:1600]))
    ((_, variance, steps, *_),) = report.pieces
    assert variance == eve_variance(carried, steps)
    assert variance > eve_variance(first_generation(before.log_weights), steps)
    torch.testing.assert_close(state.genealogy.eves, torch.arange(64))
    torch.testing.assert_close(state.genealogy.eve_weights, state.log_weights.exp())
    after = state
    state, report = absorb(kernel, state, Rows(x[1600:], y[1600:]), history, g)
    expected = eve_variance(first_generation(after.log_weights), report.pieces[0].steps)
    assert report.pieces[0].log_evidence_increment_variance == expected
    # a state stored before the slot existed (empty Eves) starts at its own particles too
    old = after._replace(genealogy=after.genealogy._replace(
        eves=torch.zeros(0, dtype=torch.int64), eve_weights=torch.zeros(0, dtype=F64)))
    assert eve_variance(standard_error.starting_eves(old), report.pieces[0].steps) == expected


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
    settings = SGAISSettings(particles=32, careful_steps=1, surprise_steps=1,
                             full_batch_rows=500)
    careful_pasts: list[int] = []

    def recording(own: Parts) -> Parts:
        def parts(piece: Piece) -> TemperedSMC:
            careful_pasts.append(len(piece.past.history))
            return own(piece)

        return parts

    kernel = with_careful_parts(model, settings, recording)
    x, y = drifting(1200, 600, seed=3)
    generator = torch.Generator().manual_seed(3)
    state, history, long_exact_pieces = init(model, settings, generator), InMemoryHistory(5), 0
    for start in range(0, 1200, 400):
        chunk = Rows(x[start : start + 400], y[start : start + 400])
        exact_phase = len(history) <= settings.full_batch_rows
        state, report = absorb(kernel, state, chunk, history, generator)
        long_exact_pieces += exact_phase * sum(len(r.steps) > 1 for r in report.pieces)
        history.append(chunk)
    assert long_exact_pieces > 0  # the exact phase had long ladders, and kept its parts
    assert careful_pasts and min(careful_pasts) > settings.full_batch_rows
