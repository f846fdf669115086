"""The piece kernel on fake parts: the anchor follows particles that drift from it between
steps, a step rule's adjustment changes the parts from its step on (its selection for that step
alone), the ``AfterPiece`` extensions run in the kernel's order, and a piece's log Ẑ and the
variance rule's variance are added to the state."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from modelcompare.estimators.data.history import RowsHistory
from modelcompare.estimators.online import anchor, standard_error
from modelcompare.estimators.online.kernel import (
    Adjustment,
    Annealed,
    PieceEnv,
    PieceKernel,
    StepPlan,
    StepRule,
    absorb_piece,
    absorb_pieces,
    next_plan,
)
from modelcompare.estimators.online.settings import PastDataSettings, SGAISSettings
from modelcompare.estimators.online.state import ParticleState, init
from modelcompare.estimators.online.target import Piece, anchor_at, past_data, with_piece
from modelcompare.models import LinearRegression
from tests.estimators.online.fake_parts import F64, cloud, keep, one_step, recorder, setting


def kernel_of(model: LinearRegression, parts: Any, **fields: Any) -> PieceKernel:
    return PieceKernel(model, PastDataSettings(anchor_drift=1.0), 100, parts, 10,
                       standard_error.delta, **fields)


def env_of(kernel: PieceKernel, piece: Any, history: Any) -> PieceEnv:
    return PieceEnv(kernel.model, piece, history, kernel.past, kernel.full_batch_rows,
                    kernel.parts, 64, torch.Generator().manual_seed(0), None, 0)


def plan_of(kernel: PieceKernel, env: PieceEnv, past: Any, rule: Any = None) -> StepPlan:
    return StepPlan(kernel.parts, past, kernel.parts(Piece(kernel.model, env.rows, past)), 0,
                    False, False, rule)


def test_drift_is_measured_in_posterior_standard_deviations() -> None:
    g = torch.Generator().manual_seed(0)
    particles = torch.randn(4000, 2, generator=g, dtype=F64) * torch.tensor([1.0, 0.01])
    uniform = torch.full((4000,), -8.29404964, dtype=F64)
    assert not anchor.drifted(particles, uniform, torch.tensor([0.5, 0.0], dtype=F64), 1.0)
    # 0.05 is far in the second coordinate, whose spread is 0.01
    assert anchor.drifted(particles, uniform, torch.tensor([0.0, 0.05], dtype=F64), 1.0)
    assert not anchor.drifted(particles, uniform, torch.tensor([0.0, 0.05], dtype=F64), 10.0)


def test_the_anchor_follows_particles_that_drift_from_it() -> None:
    """A cloud within its spread of the anchor keeps it and the parts; one that drifted
    re-anchors at its mean (the past's gradient sum and the piece's at the new point) and the
    parts are rebuilt on it."""
    model, history, piece = setting()
    start = with_piece(model, anchor_at(model, torch.zeros(3, dtype=F64), history), piece)
    made: list[tuple[str, Piece]] = []
    kernel = kernel_of(model, recorder(made, "plain"))
    env = env_of(kernel, piece, history)
    plan = plan_of(kernel, env, past_data(history, 100, 50, start))
    near = cloud([0.0, 0.0, 0.001])  # within one spread (0.01) of the anchor: kept
    assert anchor.followed(model, piece, plan.past, near.particles, near.log_weights, 1.0) is None
    plan = next_plan(kernel, env, plan, near)
    assert not plan.reanchored and not plan.rebuild and len(made) == 1
    assert plan.past.anchor is start and plan.steps == 1
    drifted = cloud([0.0, 1.0, -1.0])
    plan = next_plan(kernel, env, plan, drifted)
    assert plan.reanchored and len(made) == 2 and plan.steps == 2
    moved = made[-1][1].past.anchor
    assert moved is plan.past.anchor and moved is not None
    mean = drifted.particles.mean(0)
    expected = with_piece(model, anchor_at(model, mean, history), piece)
    torch.testing.assert_close(moved.point, mean)
    torch.testing.assert_close(moved.grad_sum, expected.grad_sum)
    assert moved.piece_grad is not None and expected.piece_grad is not None
    torch.testing.assert_close(moved.piece_grad, expected.piece_grad)


def test_a_step_rule_changes_the_parts_and_its_selection_lasts_one_step() -> None:
    """A rule that asks at step 2 for other parts and a selection of their own: step 2 has both,
    step 3 the other parts rebuilt with their own selection, step 4 the same parts. The rule
    reads each step's count and λ; a rule whose ``start`` gave None is not asked."""
    model, history, piece = setting()
    made: list[tuple[str, Piece]] = []
    asked: list[tuple[int, float]] = []

    def widen(*_: object) -> None:
        return None

    def update(run: str, steps: int, temperature: float) -> tuple[str, Adjustment]:
        asked.append((steps, temperature))
        return run, Adjustment(recorder(made, "other"), widen) if steps == 2 else Adjustment()

    kernel = kernel_of(model, recorder(made, "plain"), step_rule=StepRule(lambda env: "on", update))
    env = env_of(kernel, piece, history)
    plan = plan_of(kernel, env, past_data(history, 100, 50, None), "on")
    selections = []
    for temperature in (0.1, 0.2, 0.3, 0.4):
        plan = next_plan(kernel, env, plan, cloud([0.0, 0.0, 0.0], temperature=temperature))
        selections.append(plan.smc.selection)
    assert asked == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]
    assert selections == [keep, widen, keep, keep]
    assert [name for name, _ in made] == ["plain", "other", "other"]
    assert plan.rule == "on"
    asked.clear()
    plan = plan_of(kernel, env, past_data(history, 100, 50, None))
    plan = next_plan(kernel, env, plan, cloud([0.0, 0.0, 0.0]))
    assert asked == [] and len(made) == 4  # "plain" built by plan_of, nothing rebuilt


def annealing_setting() -> tuple[LinearRegression, Any, Any, ParticleState]:
    """A piece of 100 rows after 500 read in full, 64 prior draws."""
    model, history, piece = setting()
    state = init(model, SGAISSettings(particles=64), torch.Generator().manual_seed(2))
    state = state._replace(n_observations=torch.tensor(500))
    return model, history, piece, state


def test_the_after_piece_extensions_follow_the_annealing_in_the_kernels_order() -> None:
    model, history, piece, state = annealing_setting()
    seen: list[tuple[str, Annealed]] = []

    def shifted(name: str, by: float) -> Any:
        def after(env: PieceEnv, annealed: Annealed) -> Annealed:
            seen.append((name, annealed))
            return annealed._replace(particles=annealed.particles + by)

        return after

    kernel = PieceKernel(model, PastDataSettings(), 600, one_step, 10, standard_error.delta,
                         after=(shifted("first", 1.0), shifted("second", 10.0)))
    after, _ = absorb_piece(kernel, state, env_of(kernel, piece, history))
    assert [name for name, _ in seen] == ["first", "second"]
    torch.testing.assert_close(seen[1][1].particles, seen[0][1].particles + 1.0)
    torch.testing.assert_close(after.particles, state.particles + 11.0)


def test_a_piece_adds_its_log_z_and_the_variance_rules_variance() -> None:
    """In one step with weights kept and no move, log Ẑ(piece) = log Σ_i W_i p(piece | θ_i);
    the variance rule gets the state before, the state after and the piece, and its variance
    and slot are what the state keeps."""
    model, history, piece, state = annealing_setting()
    state = state._replace(log_evidence=torch.tensor(-3.0, dtype=F64),
                           log_evidence_variance=torch.tensor(0.5, dtype=F64))
    got: list[tuple[ParticleState, ParticleState, Annealed]] = []
    marked = state.genealogy._replace(lost_eves=torch.tensor(7.0, dtype=F64))

    def rule(before: ParticleState, after: ParticleState,
             annealed: Annealed) -> tuple[float, ParticleState]:
        got.append((before, after, annealed))
        return 0.25, after._replace(genealogy=marked)

    kernel = PieceKernel(model, PastDataSettings(), 600, one_step, 10, rule)
    after, report = absorb_piece(kernel, state, env_of(kernel, piece, history))
    log_likelihood = model.log_likelihood(state.particles, piece.x, piece.y).sum(-1)
    expected = float(torch.logsumexp(state.log_weights + log_likelihood, 0))
    ((before, unruled, annealed),) = got
    assert before is state and len(annealed.steps) == 1
    assert float(unruled.log_evidence) == pytest.approx(-3.0 + expected, abs=1e-9)
    assert int(unruled.n_observations) == 600 and unruled.log_evidence_variance == 0.5
    assert report.log_evidence_increment == pytest.approx(expected, abs=1e-9)
    assert report.log_evidence_increment_variance == 0.25
    assert report.delta_method_variance == annealed.steps[0].log_evidence_increment_variance
    assert float(after.log_evidence_variance) == 0.75 and after.genealogy is marked
    torch.testing.assert_close(after.log_weights,
                               torch.log_softmax(state.log_weights + log_likelihood, 0))


def test_a_chunk_is_absorbed_piece_by_piece_after_exactly_its_history() -> None:
    """From n = 0 the schedule cuts 100 rows into pieces of 20; each piece is annealed after
    exactly the rows before it, and a history that is not the state's rows is refused."""
    model, _, chunk, state = annealing_setting()
    envs: list[PieceEnv] = []

    def counted(env: PieceEnv, annealed: Annealed) -> Annealed:
        envs.append(env)
        return annealed

    kernel = PieceKernel(model, PastDataSettings(), 600, one_step, 10, standard_error.delta,
                         after=(counted,))
    g, empty = torch.Generator().manual_seed(0), RowsHistory(chunk.slice(0, 0))
    with pytest.raises(ValueError, match="history has 0 rows but the state has seen 500"):
        absorb_pieces(kernel, state, chunk, empty, g, None)
    state = state._replace(n_observations=torch.tensor(0))
    after, reports = absorb_pieces(kernel, state, chunk, empty, g, None)
    assert [env.absorbed_rows for env in envs] == [0, 20, 40, 60, 80]
    assert [len(env.history) for env in envs] == [0, 20, 40, 60, 80]
    for env in envs:
        assert torch.equal(env.rows.y, chunk.y[env.absorbed_rows : env.absorbed_rows + 20])
    assert len(reports) == 5 and int(after.n_observations) == 100
    total = sum(report.log_evidence_increment for report in reports)
    assert float(after.log_evidence) == pytest.approx(total, abs=1e-9)
