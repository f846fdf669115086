"""The cooperative deadline: checked between annealing steps and between moves, it stops an
update with ``BudgetExceeded`` naming how far it got, and leaves the state as it was; a cutoff
abandons it with ``CutOff``, which no step takes as a reason to do less."""

from __future__ import annotations

import math
import time

import pytest
import torch

from modelcompare.estimators import (
    METHODS,
    BudgetExceeded,
    CutOff,
    Deadline,
    OnlineEvidence,
    Progress,
    Rows,
)
from modelcompare.estimators.data.history import RowsHistory
from modelcompare.estimators.deadline import Checkpoint, check_deadline
from modelcompare.estimators.online import standard_error
from modelcompare.estimators.online.kernel import PieceKernel
from modelcompare.estimators.online.reestimate import reestimated
from modelcompare.estimators.online.reports import ChunkReport
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.state import ParticleState, init
from modelcompare.estimators.online.target import Piece
from modelcompare.estimators.smc.resampling import Selected
from modelcompare.estimators.smc.tempered import Moved, TemperedSMC
from modelcompare.models import LinearRegression

SMALL = {  # cheap settings per method; every method but exact anneals or iterates
    "sgais": {"particles": 16, "hmc_moves": 3, "leapfrog_steps": 3},
    "sequential": {"particles": 16, "hmc_moves": 3, "leapfrog_steps": 3},
    "minibatch_mh": {"particles": 16, "hmc_moves": 3, "leapfrog_steps": 3},
    "hybrid": {"particles": 16, "live_points": 16, "nested_parallel": 4},
    "ais": {"particles": 16, "hmc_moves": 2, "leapfrog_steps": 3},
    "nested": {"live_points": 16, "parallel": 4},
    "exact": {},
}


class CountingClock:
    """A clock that reads 1, 2, 3, … : a deadline at k passes on the k-th check."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return float(self.calls)


def data(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 2, generator=g, dtype=torch.float64)
    return x, x @ torch.tensor([2.0, -1.5], dtype=torch.float64) + 0.1 * torch.randn(
        rows, generator=g, dtype=torch.float64
    )


def snapshot(tracker: OnlineEvidence) -> tuple[bytes, int]:
    return tracker.state_bytes(), tracker.n_observations


def test_settings_cover_every_method() -> None:
    assert set(SMALL) == set(METHODS)


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(set(METHODS) - {"exact"}))
def test_a_passed_deadline_stops_the_update_and_changes_nothing(method: str) -> None:
    tracker = OnlineEvidence(LinearRegression(2), method=method, seed=1, **SMALL[method])
    x, y = data(60)
    tracker.update(x[:30], y[:30])
    before = snapshot(tracker)
    with pytest.raises(BudgetExceeded) as raised:
        tracker.update(x[30:], y[30:], deadline=Deadline(0.0, clock=lambda: 1.0))
    assert raised.value.progress.rows == 0 and raised.value.progress.steps == 0
    assert snapshot(tracker) == before
    tracker.update(x[30:], y[30:])  # without a deadline the same chunk goes through
    assert tracker.n_observations == 60


def test_exact_updates_take_a_deadline_and_have_nothing_to_interrupt() -> None:
    tracker = OnlineEvidence(LinearRegression(2), method="exact")
    x, y = data(30)
    tracker.update(x, y, deadline=Deadline(0.0, clock=lambda: 1.0))
    assert tracker.n_observations == 30


def test_the_deadline_is_checked_between_the_moves_of_a_step() -> None:
    """Exact phase, 3 HMC transitions per step: per step one check before it and one between
    each pair of transitions. A deadline at the 5th check passes inside step 2's move."""
    clock = CountingClock()
    tracker = OnlineEvidence(LinearRegression(2), seed=2, **SMALL["sgais"])
    x, y = data(20)
    with pytest.raises(BudgetExceeded) as raised:
        tracker.update(x, y, deadline=Deadline(5.0, clock=clock))
    progress = raised.value.progress
    assert clock.calls == 5
    assert progress.rows == 0 and progress.steps == 1 and 0.0 < progress.temperature < 1.0
    assert f"λ = {progress.temperature:.3g}" in str(raised.value)
    assert tracker.n_observations == 0


def test_progress_counts_the_pieces_of_the_chunk_already_absorbed() -> None:
    """A 100-row first chunk is absorbed in 20-row pieces (the schedule): a deadline that
    passes right after the first piece reports 20 rows absorbed and λ = 0 on the next."""
    x, y = data(100)
    counter = CountingClock()
    first = OnlineEvidence(LinearRegression(2), seed=3, **SMALL["sgais"])
    first.update(x[:20], y[:20], deadline=Deadline(math.inf, clock=counter))
    clock = CountingClock()
    tracker = OnlineEvidence(LinearRegression(2), seed=3, **SMALL["sgais"])
    with pytest.raises(BudgetExceeded) as raised:
        tracker.update(x, y, deadline=Deadline(counter.calls + 1.0, clock=clock))
    assert raised.value.progress == (20, 0.0, 0)
    assert tracker.n_observations == 0


def test_deadline_after_uses_the_clock() -> None:
    clock = CountingClock()
    deadline = Deadline.after(2.0, clock=clock)  # clock reads 1: due at 3
    assert deadline.at == 3.0
    assert not deadline.passed() and deadline.passed()  # reads 2, then 3


def test_a_cpu_deadline_counts_the_threads_own_work_not_waiting() -> None:
    deadline = Deadline.cpu_after(0.05)
    time.sleep(0.2)  # a busy host's other work, as this thread sees it: time passes, no CPU
    assert not deadline.passed()
    spin = time.thread_time() + 0.06
    while time.thread_time() < spin:
        pass
    assert deadline.passed()


def test_a_cutoff_before_the_budget_raises_cut_off() -> None:
    clock = CountingClock()
    deadline = Deadline.after(10.0, clock=clock, cutoff=3.0)  # clock reads 1: budget 11, cut 4
    assert (deadline.at, deadline.cutoff) == (11.0, 4.0)
    check_deadline(deadline, Progress(0, None, 0))  # reads 2
    check_deadline(deadline, Progress(0, None, 0))  # reads 3
    with pytest.raises(CutOff):
        check_deadline(deadline, Progress(0, None, 0))  # reads 4


def test_a_shared_out_deadline_keeps_the_cutoff() -> None:
    clock = CountingClock()
    deadline = Deadline.after(9.0, clock=clock, cutoff=2.0)  # reads 1: at 10, cut off at 3
    half = deadline.share(0.5)  # reads 2: halfway from 2 to 10
    assert (half.at, half.cutoff, half.clock) == (6.0, 3.0, clock)


def until_stopped(piece: Piece) -> TemperedSMC:
    """Parts of a one-step ladder whose move runs until its deadline stops it."""

    def move(particles: torch.Tensor, temperature: float, scale: torch.Tensor,
             generator: torch.Generator, checkpoint: Checkpoint) -> Moved:
        while True:
            checkpoint()

    return TemperedSMC(
        lambda theta: torch.zeros(theta.shape[0], dtype=torch.float64),
        lambda log_weights, log_likelihood, remaining: remaining,
        lambda particles, log_weights, ess, generator: Selected(particles, log_weights, False),
        move,
    )


def test_a_re_estimate_past_its_half_budget_is_abandoned_but_a_cutoff_is_raised() -> None:
    """The re-estimate gets half of what is left of the budget and is abandoned past it (the
    state as it was, the attempt marked at its rows, the chunk's report as it was); past the
    cutoff the whole update is abandoned instead, so that an update which ends before its
    cutoff is the one the budget alone would have given."""
    model, settings = LinearRegression(1), SGAISSettings(particles=4)
    rows = Rows(torch.zeros(4, 1, dtype=torch.float64), torch.zeros(4, dtype=torch.float64))
    empty = rows.slice(0, 0)
    kernel = PieceKernel(model, settings, 100, until_stopped, 10, standard_error.delta)
    state = init(model, settings, torch.Generator().manual_seed(1))
    state = state._replace(n_observations=torch.tensor(4))
    report = ChunkReport((), False, 0.5)

    def fresh(generator: torch.Generator) -> ParticleState:
        return init(model, settings, generator)

    def run(deadline: Deadline) -> tuple[ParticleState, ChunkReport]:
        return reestimated(kernel, fresh, state, RowsHistory(empty), rows,
                           torch.Generator().manual_seed(0), deadline, report)

    clock = CountingClock()
    kept, kept_report = run(Deadline.after(10.0, clock=clock))  # reads 1: the budget ends at 11
    assert clock.calls == 7  # the share (read 2) ends at 6.5: the 7th read stops the pass
    assert kept_report is report and kept.particles is state.particles
    assert int(kept.reestimate.last_rows) == 4 and kept.log_evidence is state.log_evidence
    with pytest.raises(CutOff):
        run(Deadline.after(10.0, clock=CountingClock(), cutoff=3.0))
