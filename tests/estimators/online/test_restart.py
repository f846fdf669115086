"""Re-estimates over the shuffled rows seen: when one is due, what leaves the particles astray
(divergence or a frozen cloud, not surprise alone), that a pass replays every row once and
leaves log Z exact on a drifting conjugate stream, that one running past half of what is left
of the budget is abandoned, and that a frozen cloud is re-estimated."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch

from modelcompare.estimators import Deadline, OnlineEvidence, exact_log_evidence
from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.online import particles, sgais
from modelcompare.estimators.online.records import ParticleState
from modelcompare.estimators.online.reports import PieceReport, astray
from modelcompare.estimators.online.restart import Restart, can_come, restart_due, shuffled
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.smc.tempered import StepInfo
from modelcompare.models import LinearRegression

F64 = torch.float64


def drifting(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = wᵀx + b + N(0, 1), (w, b) redrawn at every third of the rows."""
    g = torch.Generator().manual_seed(seed)
    weights = 3.0 * torch.randn(3, 3, generator=g, dtype=F64)
    x = torch.randn(rows, 2, generator=g, dtype=F64)
    chosen = weights[torch.arange(rows) * 3 // rows]
    return x, (x * chosen[:, :-1]).sum(1) + chosen[:, -1] + torch.randn(rows, generator=g,
                                                                        dtype=F64)


def test_a_re_estimate_is_due_after_an_astray_chunk_within_the_bounds() -> None:
    restart = Restart(growth=2.0, min_rows=1000, max_rows=20_000)
    assert restart_due(restart, 1000, 0, True)
    assert not restart_due(restart, 1000, 0, False)
    assert not restart_due(restart, 500, 0, True)
    assert not restart_due(restart, 20_500, 0, True)
    assert can_come(restart, 20_000) and not can_come(restart, 20_500)
    assert not restart_due(restart, 1500, 1000, True)
    assert restart_due(restart, 2000, 1000, True)


def test_shuffled_holds_every_row_once() -> None:
    x, y = drifting(50, 0)
    rows = shuffled(RowsHistory(Rows(x[:30], y[:30])), Rows(x[30:], y[30:]),
                    torch.Generator().manual_seed(1))
    assert rows.x is not None and rows.y is not None
    assert not torch.equal(rows.y, y)
    assert torch.equal(torch.sort(rows.y).values, torch.sort(y).values)
    assert torch.equal(rows.x[torch.argsort(rows.y)], x[torch.argsort(y)])


def test_growth_below_one_and_a_half_is_refused_and_zero_turns_them_off() -> None:
    with pytest.raises(pydantic.ValidationError, match="restart_growth"):
        SGAISSettings(restart_growth=1.2)
    assert SGAISSettings().restart == Restart(2.0, 1000, 20_000)
    assert SGAISSettings(restart_growth=0.0).restart is None
    assert SGAISSettings(restart_growth=3.0).restart == Restart(3.0, 1000, 20_000)


def piece(diverged: tuple[float | None, ...], ess: float = 64.0) -> PieceReport:
    """A piece of len(diverged) annealing steps whose moves undid those fractions."""
    steps = tuple(StepInfo(-1.0, 0.0, ess, False, (), diverged=d) for d in diverged)
    return PieceReport(-1.0 * len(steps), 0.0, steps, False, 0.0)


def test_divergence_or_a_frozen_cloud_leaves_the_particles_astray_not_a_long_ladder() -> None:
    assert astray((piece((0.3, 0.0)),), 1.0)  # 15% of the chunk's trajectories diverged
    assert not astray((piece((0.1, 0.1)), piece((0.0,))), 1.0)
    assert astray((piece((None,)),), 1e-6)  # frozen
    assert not astray((piece((None,)),), math.nan)  # spread not measured
    # 40 steps, the ESS at 1 of 64: surprising, and nothing broken
    assert not astray((piece((0.0,) * 40, ess=1.0),), 0.9)


@pytest.mark.slow
def test_a_surprising_chunk_alone_makes_no_re_estimate() -> None:
    """A drifting stream surprises the particles at each change point (long ladders, extra
    moves) but leaves nothing diverged or frozen: no re-estimate, and log Z stays exact."""
    model = LinearRegression(2)
    x, y = drifting(1500, 3)
    tracker = OnlineEvidence(model, seed=3, full_batch_rows=100, restart_min_rows=200)
    surprises = 0
    for start in range(0, 1500, 100):
        info = tracker.update(x[start : start + 100], y[start : start + 100])
        surprises += info.surprises
        assert not info.restarted
    assert surprises > 0 and int(tracker.state.astray_rows) == 0
    error = tracker.log_evidence - exact_log_evidence(model, x, y)
    assert abs(error) < 3 * tracker.log_evidence_stderr


@pytest.mark.slow
def test_re_estimates_of_an_astray_cloud_replay_every_row_and_leave_log_z_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every chunk reads astray here: a re-estimate comes once n has doubled since the last,
    and each leaves log Z within its error bar of the exact one on a drifting stream."""
    monkeypatch.setattr(particles, "astray", lambda *args: True)
    model = LinearRegression(2)
    x, y = drifting(1500, 3)
    tracker = OnlineEvidence(model, seed=3, full_batch_rows=100, restart_min_rows=200)
    without = OnlineEvidence(model, seed=3, full_batch_rows=100, restart_growth=0.0)
    restarts = []
    for start in range(0, 1500, 100):
        info = tracker.update(x[start : start + 100], y[start : start + 100])
        assert not without.update(x[start : start + 100], y[start : start + 100]).restarted
        if info.restarted:
            n = start + 100
            restarts.append(n)
            assert int(tracker.state.restart_rows) == n
            exact = exact_log_evidence(model, x[:n], y[:n])
            assert abs(tracker.log_evidence - exact) < 3 * tracker.log_evidence_stderr
    assert restarts == [300, 600, 1200]  # the first chunk after the exact phase ends at 300
    assert int(without.state.restart_rows) == 0
    error = tracker.log_evidence - exact_log_evidence(model, x, y)
    assert abs(error) < 3 * tracker.log_evidence_stderr


@pytest.mark.slow
def test_a_re_estimate_past_half_the_remaining_budget_is_abandoned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clock jumps to 99 of a budget ending at 100 when the re-estimate starts: past its
    half (50), so the in-order state is kept and the other models keep the rest."""
    monkeypatch.setattr(particles, "astray", lambda *args: True)
    model = LinearRegression(2)
    x, y = drifting(800, 4)
    settings = SGAISSettings(full_batch_rows=100, restart_growth=2.0, restart_min_rows=200,
                             particles=32)
    now = [0.0]

    def fresh(generator: torch.Generator) -> ParticleState:
        now[0] = 99.0
        return particles.init(model, settings, generator)

    loop = sgais.loop(model, settings)._replace(fresh=fresh)
    state = particles.init(model, settings, torch.Generator().manual_seed(0))
    seen = RowsHistory(Rows(x[:0], y[:0]))
    for start in range(0, 800, 100):
        chunk = Rows(x[start : start + 100], y[start : start + 100])
        now[0] = 0.0
        deadline = Deadline(100.0, lambda: now[0])
        generator = torch.Generator().manual_seed(start)
        state, report = particles.absorb(loop, state, chunk, seen, generator, deadline)
        seen = RowsHistory(Rows(x[: start + 100], y[: start + 100]))
        if now[0] == 99.0:  # a re-estimate was due and started
            break
    else:
        pytest.fail("no re-estimate was due on an astray stream")
    # the in-order state, the attempt marked (the next waits for n to double), still astray
    assert int(state.n_observations) == start + 100 == int(state.restart_rows)
    assert int(state.astray_rows) > 0
    assert not report.restarted


def iid(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = wᵀx + b + N(0, 1) with one (w, b)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2, generator=g, dtype=F64)
    return x, x @ torch.tensor([1.0, -1.0], dtype=F64) + 0.5 + torch.randn(rows, generator=g,
                                                                          dtype=F64)


@pytest.mark.slow
def test_a_frozen_cloud_is_astray_and_re_estimated() -> None:
    """A cloud collapsed onto one point (what sorted mixture data set 22 came to) explains
    each piece in one annealing step, surprises no one and diverges nowhere: its spread beside
    the posterior's marks it astray, and the re-estimate brings log Z back to the exact one."""
    model = LinearRegression(2)
    x, y = iid(1200, 5)
    tracker = OnlineEvidence(model, seed=5, full_batch_rows=100, restart_growth=2.0,
                             restart_min_rows=600)
    for start in range(0, 300, 100):
        tracker.update(x[start : start + 100], y[start : start + 100])
    state = tracker.state
    g = torch.Generator().manual_seed(0)
    collapsed = state.particles[0] + 1e-9 * torch.randn(state.particles.shape, generator=g,
                                                        dtype=F64)
    tracker.state = state._replace(particles=collapsed)
    info = tracker.update(x[300:400], y[300:400])
    # every piece in one step
    assert info.annealing_steps == info.sub_chunks and info.surprises == 0
    assert not info.diverged_fraction
    assert int(tracker.state.astray_rows) == 400
    for start in range(400, 600, 100):
        info = tracker.update(x[start : start + 100], y[start : start + 100])
    assert info.restarted and int(tracker.state.restart_rows) == 600
    error = tracker.log_evidence - exact_log_evidence(model, x[:600], y[:600])
    assert abs(error) < 3 * tracker.log_evidence_stderr
    assert int(tracker.state.astray_rows) == 0  # the pass's cloud follows the posterior


@pytest.mark.slow
def test_a_pass_that_froze_leaves_the_particles_astray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cloud reads as frozen here, the re-estimate's too: it still replaces the state
    (the in-order one is no better), but the next re-estimate is due once n has doubled,
    without waiting for a new sign."""
    monkeypatch.setattr(particles, "relative_spread", lambda *args: 0.0)
    model = LinearRegression(2)
    x, y = iid(1200, 6)
    tracker = OnlineEvidence(model, seed=6, full_batch_rows=100, restart_growth=2.0,
                             restart_min_rows=600)
    restarts = []
    for start in range(0, 1200, 100):
        if tracker.update(x[start : start + 100], y[start : start + 100]).restarted:
            restarts.append(start + 100)
            assert int(tracker.state.astray_rows) == start + 100
    assert restarts == [600, 1200]
