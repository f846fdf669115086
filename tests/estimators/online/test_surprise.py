"""Robustness to surprise: when the anchor counts as drifted, which pieces are surprising, and
that SG-AIS re-anchors and moves more after a change point while staying exact on average."""

from __future__ import annotations

import pytest
import torch

from modelcompare.estimators import OnlineEvidence, exact_log_evidence
from modelcompare.estimators.online.surprise import Surprise, drifted, surprising
from modelcompare.estimators.smc.tempered import StepInfo
from modelcompare.models import LinearRegression

F64 = torch.float64


def step(ess: float) -> StepInfo:
    return StepInfo(0.0, 0.0, ess, False, ())


def test_drift_is_measured_in_posterior_standard_deviations() -> None:
    g = torch.Generator().manual_seed(0)
    particles = torch.randn(4000, 2, generator=g, dtype=F64) * torch.tensor([1.0, 0.01])
    uniform = torch.full((4000,), -8.29404964, dtype=F64)
    assert not drifted(particles, uniform, torch.tensor([0.5, 0.0], dtype=F64), 1.0)
    # 0.05 is far in the second coordinate, whose spread is 0.01
    assert drifted(particles, uniform, torch.tensor([0.0, 0.05], dtype=F64), 1.0)
    assert not drifted(particles, uniform, torch.tensor([0.0, 0.05], dtype=F64), 10.0)


def test_a_piece_is_surprising_by_its_ladder_length_or_its_ess() -> None:
    surprise = Surprise(steps=3, ess=0.1, moves=5)
    assert not surprising(surprise, (step(50.0), step(40.0)), 64)
    assert surprising(surprise, tuple(step(50.0) for _ in range(4)), 64)
    assert surprising(surprise, (step(50.0), step(5.0)), 64)


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
