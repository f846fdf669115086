"""Re-estimates over the shuffled rows seen: when one is due, what leaves the particles astray
(divergence, a frozen or wide cloud, a piece longer than the exact phase; not surprise alone),
the exact phase's steps, the settings and their old names; around a fake inner chunk update,
that none comes in the exact phase, that the exact phase's steps are counted and kept, that the
spread is measured where the inner did not, that astray is remembered and that the pass runs
exactly when due; on real streams, that a drifting stream's change points are re-estimated and
leave log Z exact, that a pass replays every row once and leaves log Z exact on a drifting
conjugate stream, that one running past half of what is left of the budget is abandoned, and
that a frozen cloud is re-estimated."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest
import torch

from modelcompare.estimators import Deadline, OnlineEvidence, exact_log_evidence
from modelcompare.estimators.data.history import Rows, RowsHistory
from modelcompare.estimators.data.schedule import split_points
from modelcompare.estimators.online import kernel as piece_kernel
from modelcompare.estimators.online import reestimate, sgais, standard_error
from modelcompare.estimators.online.extension_settings import ReestimateSettings
from modelcompare.estimators.online.kernel import ChunkUpdate, PieceKernel, absorb
from modelcompare.estimators.online.reestimate import can_come, due, reestimating, shuffled
from modelcompare.estimators.online.reports import (
    ChunkReport,
    PieceReport,
    astray,
    exact_phase_steps,
)
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.state import ParticleState, init
from modelcompare.estimators.smc.tempered import StepInfo
from modelcompare.models import LinearRegression
from tests.estimators.online.fake_parts import level

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
    settings = ReestimateSettings(reestimate_growth=2.0, reestimate_min_rows=1000,
                                  reestimate_max_rows=20_000)
    assert due(settings, 1000, 0, True)
    assert not due(settings, 1000, 0, False)
    assert not due(settings, 500, 0, True)
    assert not due(settings, 20_500, 0, True)
    assert can_come(settings, 20_000) and not can_come(settings, 20_500)
    assert not due(settings, 1500, 1000, True)
    assert due(settings, 2000, 1000, True)


def test_shuffled_holds_every_row_once() -> None:
    x, y = drifting(50, 0)
    rows = shuffled(RowsHistory(Rows(x[:30], y[:30])), Rows(x[30:], y[30:]),
                    torch.Generator().manual_seed(1))
    assert rows.x is not None and rows.y is not None
    assert not torch.equal(rows.y, y)
    assert torch.equal(torch.sort(rows.y).values, torch.sort(y).values)
    assert torch.equal(rows.x[torch.argsort(rows.y)], x[torch.argsort(y)])


def test_growth_below_one_and_a_half_is_refused_and_zero_turns_them_off() -> None:
    with pytest.raises(pydantic.ValidationError, match="reestimate_growth"):
        SGAISSettings(reestimate_growth=1.2)
    defaults = SGAISSettings()
    assert (defaults.reestimate_growth, defaults.reestimate_min_rows,
            defaults.reestimate_max_rows) == (2.0, 1000, 20_000)
    assert SGAISSettings(reestimate_growth=3.0).reestimate_growth == 3.0
    settings = SGAISSettings(reestimate_growth=0.0)
    model = LinearRegression(2)
    inner = functools.partial(absorb, sgais.kernel(model, settings))
    assert reestimating(sgais.kernel(model, settings), settings, lambda g: None,  # type: ignore[arg-type,return-value]
                        inner) is inner


def test_the_old_names_still_validate_and_not_beside_the_new_ones() -> None:
    """``restart_*`` (stored comparisons, old requests) map to ``reestimate_*``, the bound
    included; an old name with its new one is refused, naming both."""
    old = SGAISSettings(restart_growth=3.0, restart_min_rows=10, restart_max_rows=99)
    assert (old.reestimate_growth, old.reestimate_min_rows, old.reestimate_max_rows) == (3.0, 10,
                                                                                       99)
    with pytest.raises(pydantic.ValidationError, match="reestimate_growth must be 0 or at least"):
        SGAISSettings(restart_growth=1.2)
    for name in ("growth", "min_rows", "max_rows"):
        with pytest.raises(pydantic.ValidationError,
                           match=f"restart_{name} is the old name of reestimate_{name}"):
            SGAISSettings(**{f"restart_{name}": 3, f"reestimate_{name}": 3})


def piece(diverged: tuple[float | None, ...], ess: float = 64.0) -> PieceReport:
    """A piece of len(diverged) annealing steps whose moves undid those fractions."""
    steps = tuple(StepInfo(-1.0, 0.0, ess, False, (), diverged=d) for d in diverged)
    return PieceReport(-1.0 * len(steps), 0.0, steps, False, 0.0)


def test_divergence_a_frozen_or_wide_cloud_or_a_ladder_past_the_exact_phase_is_astray(
) -> None:
    assert astray((piece((0.3, 0.0)),), 1.0, 0)  # 15% of the chunk's trajectories diverged
    assert not astray((piece((0.1, 0.1)), piece((0.0,))), 1.0, 0)
    assert astray((piece((None,)),), 1e-6, 0)  # frozen
    assert astray((piece((0.0,)),), 4.5, 0)  # wide
    assert not astray((piece((0.0,)),), 1.3, 0)  # the widest a healthy stream read
    assert not astray((piece((None,)),), math.nan, 0)  # spread not measured
    # 40 steps, the ESS at 1 of 64: surprising, and no longer a ladder than the exact phase's
    long = piece((0.0,) * 40, ess=1.0)
    assert not astray((long,), 0.9, 40) and not astray((piece((0.0,)), long), 0.9, 61)
    assert astray((piece((0.0,)), long), 0.9, 39)  # one piece longer than the exact phase
    assert not astray((long,), 0.9, 0)  # the exact phase's steps not known


def test_the_exact_phase_steps_are_those_of_the_pieces_that_start_within_it() -> None:
    """Pieces starting at 60, 80, 100, 125 and 156 rows seen: with the past read in full while
    n ≤ 100, those starting at 60, 80 and 100 count."""
    reports = tuple(piece((0.0,) * steps)._replace(seen=seen)
                    for steps, seen in zip((3, 5, 7, 11, 13), (60, 80, 100, 125, 156), strict=True))
    assert exact_phase_steps(reports, 100) == 3 + 5 + 7
    assert exact_phase_steps(reports, 99) == 3 + 5
    assert exact_phase_steps(reports[3:], 100) == 0
    # a Gaussian start's steps are not a path from the prior (``gaussian_start``)
    started = (reports[0]._replace(seen=0, started=True), *reports[1:])
    assert exact_phase_steps(started, 100) == 5 + 7


class Fake:
    """A fake inner chunk update (it counts the rows, its report says what ``signs`` holds),
    fake prior draws that count themselves, and relative_spread reading 0.9, counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> None:
        self.model = LinearRegression(2)
        self.settings = SGAISSettings(particles=16, full_batch_rows=100, control_variates=False,
                                      **settings)
        # the pass runs the piece kernel on fake parts: one step per piece, log Ẑ = −rows
        self.kernel = PieceKernel(self.model, self.settings, 100, level, 10,
                                  standard_error.delta)
        self.signs = {"diverged": 0.0, "spread": math.nan, "steps": 1}
        self.reports: list[ChunkReport] = []
        self.fresh: list[int] = []
        self.spreads: list[int] = []
        monkeypatch.setattr(piece_kernel, "relative_spread", self.spread)
        self.update = reestimating(self.kernel, self.settings, self.prior, self.inner)

    def inner(self, state: ParticleState, chunk: Rows, *_: object) -> tuple[ParticleState,
                                                                             ChunkReport]:
        """One report per schedule piece, each of ``signs["steps"]`` steps."""
        steps = (self.signs["diverged"],) * int(self.signs["steps"])
        n = int(state.n_observations)
        pieces = tuple(piece(steps)._replace(seen=n + begin)
                       for begin, _ in split_points(n, chunk.count))
        report = ChunkReport(pieces, False, self.signs["spread"])
        self.reports.append(report)
        return state._replace(n_observations=state.n_observations + chunk.count), report

    def prior(self, generator: torch.Generator) -> ParticleState:
        self.fresh.append(1)
        return init(self.model, self.settings, generator)

    def spread(self, model: object, particles: torch.Tensor, *_: object) -> float:
        self.spreads.append(particles.shape[0])
        return 0.9

    def chunks(self, rows: int, deadline: Callable[[], Deadline | None] = lambda: None,
               ) -> Iterator[tuple[int, ParticleState, ChunkReport]]:
        """The state and report after each chunk of 100 rows, by the rows seen after it."""
        x, y = drifting(rows, 0)
        state = init(self.model, self.settings, torch.Generator().manual_seed(0))
        for start in range(0, rows, 100):
            history = RowsHistory(Rows(x[:start], y[:start]))
            chunk = Rows(x[start : start + 100], y[start : start + 100])
            state, report = self.update(state, chunk, history, torch.Generator().manual_seed(start),
                                        deadline())
            yield start + 100, state, report


def test_no_re_estimate_or_measure_in_the_exact_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every chunk astray and a re-estimate due from n = 0: the chunks that start while the past
    is read in full (n ≤ 100) come back as the inner left them; the first after runs the pass."""
    fake = Fake(monkeypatch, reestimate_min_rows=0)
    fake.signs["diverged"] = 0.5
    seen = [(n, report) for n, _, report in fake.chunks(300)]
    assert seen[0][1] is fake.reports[0] and seen[1][1] is fake.reports[1]
    assert [report.reestimated for _, report in seen] == [False, False, True]
    assert fake.fresh == [1] and fake.spreads == [16, 16]  # the chunk's cloud, the pass's


def test_the_exact_phase_is_counted_and_a_piece_longer_than_it_is_astray(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exact phase (n ≤ 100) takes 6 one-step pieces: the first chunk's 5 and the first of
    the second's (its others start past 100). Pieces of 6 steps after it leave nothing astray;
    the first chunk of 7-step pieces (ending at 400) does, the pass at 500 keeps the stream's
    count, and the next such chunk is astray again."""
    fake = Fake(monkeypatch, reestimate_min_rows=500)
    marks = []
    for n, state, report in fake.chunks(600):
        fake.signs["steps"] = 1 if n < 200 else 6 if n < 300 else 7  # the next chunk's pieces
        marks.append((n, int(state.reestimate.exact_steps), int(state.reestimate.astray_rows),
                      report.reestimated))
    assert marks == [(100, 5, 0, False), (200, 6, 0, False), (300, 6, 0, False),
                     (400, 6, 400, False), (500, 6, 0, True), (600, 6, 600, False)]


def test_the_spread_is_measured_where_the_inner_did_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing astray: past the exact phase a chunk whose inner report has no spread is measured
    (0.9), one that has one keeps it; past ``reestimate_max_rows`` neither is."""
    fake = Fake(monkeypatch, reestimate_max_rows=400)
    spreads = []
    for n, state, report in fake.chunks(600):
        spreads.append(report.spread)
        fake.signs["spread"] = 0.8 if n == 200 else math.nan
        assert not report.reestimated and int(state.reestimate.astray_rows) == 0
    assert [None if math.isnan(s) else s for s in spreads] == [None, None, 0.8, 0.9, None, None]
    assert fake.spreads == [16] and fake.fresh == []


def test_astray_is_remembered_until_a_re_estimate_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """One astray chunk (ending at 300, the first past the exact phase) marks the slot; the
    chunks after it say nothing, and the pass still comes at ``reestimate_min_rows`` (500),
    after which the slot is clear."""
    fake = Fake(monkeypatch, reestimate_min_rows=500)
    marks = []
    for n, state, report in fake.chunks(700):
        fake.signs["diverged"] = 0.5 if n == 200 else 0.0
        marks.append((n, int(state.reestimate.astray_rows), int(state.reestimate.last_rows),
                      report.reestimated))
    assert marks == [(100, 0, 0, False), (200, 0, 0, False), (300, 300, 0, False),
                     (400, 300, 0, False), (500, 0, 500, True), (600, 0, 500, False),
                     (700, 0, 500, False)]
    assert fake.fresh == [1]


def test_the_pass_runs_exactly_when_due_and_marks_its_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every chunk astray: passes at 300 (``reestimate_min_rows``), then once n has doubled,
    each over every row seen: its state has their count and its own log Z (−n; the inner's
    is 0), the chunk's pieces are the inner's, and ``last_rows`` is n."""
    fake = Fake(monkeypatch, reestimate_min_rows=300)
    fake.signs["diverged"] = 0.5
    passes = []
    for n, state, report in fake.chunks(1300):
        assert int(state.n_observations) == n
        if report.reestimated:
            passes.append(n)
            assert report.pieces is fake.reports[-1].pieces and report.spread == 0.9
            assert int(state.reestimate.last_rows) == n and float(state.log_evidence) == -n
        else:
            assert int(state.reestimate.last_rows) == (passes[-1] if passes else 0)
            assert float(state.log_evidence) == (-passes[-1] if passes else 0.0)
    assert passes == [300, 600, 1200] and len(fake.fresh) == 3


def test_a_pass_past_half_the_remaining_budget_is_abandoned_and_marked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clock jumps from 0 to 99 of a budget ending at 100 when the pass draws from the
    prior: past its half, so the in-order state and report are kept, the attempt marked at n
    and the particles still astray; the next pass waits for n to double."""
    fake = Fake(monkeypatch, reestimate_min_rows=300)
    fake.signs["diverged"] = 0.5
    now = [0.0]
    prior = fake.prior

    def late(generator: torch.Generator) -> ParticleState:
        now[0] = 99.0
        return prior(generator)

    fake.update = reestimating(fake.kernel, fake.settings, late, fake.inner)

    def deadline() -> Deadline:
        now[0] = 0.0
        return Deadline(100.0, lambda: now[0])

    marks = [(n, int(state.reestimate.last_rows), int(state.reestimate.astray_rows),
              report.reestimated, report.pieces is fake.reports[-1].pieces)
             for n, state, report in fake.chunks(700, deadline)]
    assert marks[2:] == [(300, 300, 300, False, True), (400, 300, 300, False, True),
                         (500, 300, 300, False, True), (600, 600, 300, False, True),
                         (700, 600, 300, False, True)]
    assert len(fake.fresh) == 2


@pytest.mark.slow
def test_a_drifting_streams_change_point_is_re_estimated_and_log_z_stays_exact() -> None:
    """Past the first change point (row 400) the pieces take ladders of 40-140 steps, longer
    than the whole exact phase's (22 steps up to row 100): astray, so the stream is re-estimated
    at 500 and again once n has doubled, and log Z stays within its error bar of the exact one
    throughout. Before the change point the pieces take at most 5 steps: nothing is astray."""
    model = LinearRegression(2)
    x, y = drifting(1200, 3)
    tracker = OnlineEvidence(model, seed=3, full_batch_rows=100, reestimate_min_rows=200)
    passes = []
    for start in range(0, 1200, 100):
        info = tracker.update(x[start : start + 100], y[start : start + 100])
        n = start + 100
        if info.reestimated:
            passes.append(n)
        if n <= 400:
            assert int(tracker.state.reestimate.astray_rows) == 0 and info.annealing_steps <= 22
        error = tracker.log_evidence - exact_log_evidence(model, x[:n], y[:n])
        assert abs(error) < 3 * tracker.log_evidence_stderr
    assert int(tracker.state.reestimate.exact_steps) == 22
    assert passes == [500, 1000]



def test_a_gaussian_start_leaves_the_exact_phase_a_path_to_measure_by() -> None:
    """A first update larger than the exact phase (400 rows, ``full_batch_rows`` 200) started
    from the Gaussian: the start covers 50 of them (a quarter of the phase), the phase anneals the
    rest up to row 200 with a ladder of its own, and an i.i.d. stream's later pieces stay shorter
    than it: nothing is astray. A start covering the whole phase left the measure to the few
    steps of the one piece after it, and every later piece longer than them re-estimated."""
    model = LinearRegression(10)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2400, 10, generator=g, dtype=F64)
    y = x @ torch.randn(10, generator=g, dtype=F64) + torch.randn(2400, generator=g, dtype=F64)
    tracker = OnlineEvidence(model, seed=4, start="laplace", full_batch_rows=200)
    first = tracker.update(x[:400], y[:400])
    exact = int(tracker.state.reestimate.exact_steps)
    assert first.sub_chunks == 1 + len(list(split_points(50, 350))) and exact >= 10
    for start in range(400, 2400, 200):
        info = tracker.update(x[start : start + 200], y[start : start + 200])
        assert not info.reestimated and info.annealing_steps < exact
    assert int(tracker.state.reestimate.astray_rows) == 0


@pytest.mark.slow
def test_re_estimates_of_an_astray_cloud_replay_every_row_and_leave_log_z_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every chunk reads astray here: a re-estimate comes once n has doubled since the last,
    and each leaves log Z within its error bar of the exact one on a drifting stream."""
    monkeypatch.setattr(reestimate, "astray", lambda *args: True)
    model = LinearRegression(2)
    x, y = drifting(1500, 3)
    tracker = OnlineEvidence(model, seed=3, full_batch_rows=100, reestimate_min_rows=200)
    without = OnlineEvidence(model, seed=3, full_batch_rows=100, reestimate_growth=0.0)
    passes = []
    for start in range(0, 1500, 100):
        info = tracker.update(x[start : start + 100], y[start : start + 100])
        assert not without.update(x[start : start + 100], y[start : start + 100]).reestimated
        if info.reestimated:
            n = start + 100
            passes.append(n)
            assert int(tracker.state.reestimate.last_rows) == n
            exact = exact_log_evidence(model, x[:n], y[:n])
            assert abs(tracker.log_evidence - exact) < 3 * tracker.log_evidence_stderr
    assert passes == [300, 600, 1200]  # the first chunk after the exact phase ends at 300
    assert int(without.state.reestimate.last_rows) == 0
    error = tracker.log_evidence - exact_log_evidence(model, x, y)
    assert abs(error) < 3 * tracker.log_evidence_stderr


@pytest.mark.slow
def test_a_re_estimate_past_half_the_remaining_budget_is_abandoned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SG-AIS itself: the clock jumps to 99 of a budget ending at 100 when the re-estimate
    starts: past its half (50), so the in-order state is kept and the other models keep the
    rest."""
    monkeypatch.setattr(reestimate, "astray", lambda *args: True)
    model = LinearRegression(2)
    x, y = drifting(800, 4)
    settings = SGAISSettings(full_batch_rows=100, reestimate_growth=2.0, reestimate_min_rows=200,
                             particles=32)
    now = [0.0]

    def fresh(generator: torch.Generator) -> ParticleState:
        now[0] = 99.0
        return init(model, settings, generator)

    kernel = sgais.kernel(model, settings)
    update: ChunkUpdate = reestimating(kernel, settings, fresh, functools.partial(absorb, kernel))
    state = init(model, settings, torch.Generator().manual_seed(0))
    seen = RowsHistory(Rows(x[:0], y[:0]))
    for start in range(0, 800, 100):
        chunk = Rows(x[start : start + 100], y[start : start + 100])
        now[0] = 0.0
        deadline = Deadline(100.0, lambda: now[0])
        generator = torch.Generator().manual_seed(start)
        state, report = update(state, chunk, seen, generator, deadline)
        seen = RowsHistory(Rows(x[: start + 100], y[: start + 100]))
        if now[0] == 99.0:  # a re-estimate was due and started
            break
    else:
        pytest.fail("no re-estimate was due on an astray stream")
    # the in-order state, the attempt marked (the next waits for n to double), still astray
    assert int(state.n_observations) == start + 100 == int(state.reestimate.last_rows)
    assert int(state.reestimate.astray_rows) > 0
    assert not report.reestimated


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
    tracker = OnlineEvidence(model, seed=5, full_batch_rows=100, reestimate_growth=2.0,
                             reestimate_min_rows=600)
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
    assert int(tracker.state.reestimate.astray_rows) == 400
    for start in range(400, 600, 100):
        info = tracker.update(x[start : start + 100], y[start : start + 100])
    assert info.reestimated and int(tracker.state.reestimate.last_rows) == 600
    error = tracker.log_evidence - exact_log_evidence(model, x[:600], y[:600])
    assert abs(error) < 3 * tracker.log_evidence_stderr
    assert int(tracker.state.reestimate.astray_rows) == 0  # the pass's cloud follows the posterior


@pytest.mark.slow
def test_a_pass_that_froze_leaves_the_particles_astray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cloud reads as frozen here, the re-estimate's too: it still replaces the state
    (the in-order one is no better), but the next re-estimate is due once n has doubled,
    without waiting for a new sign."""
    # where a chunk's and a pass's spread is read (``kernel.spread_after``)
    monkeypatch.setattr(piece_kernel, "relative_spread", lambda *args: 0.0)
    model = LinearRegression(2)
    x, y = iid(1200, 6)
    tracker = OnlineEvidence(model, seed=6, full_batch_rows=100, reestimate_growth=2.0,
                             reestimate_min_rows=600)
    passes = []
    for start in range(0, 1200, 100):
        if tracker.update(x[start : start + 100], y[start : start + 100]).reestimated:
            passes.append(start + 100)
            assert int(tracker.state.reestimate.astray_rows) == start + 100
    assert passes == [600, 1200]
