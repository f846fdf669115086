"""Catch-up of a model added mid-stream (service/catch_up.py): a replay step holds the worker no
longer than one live update may, and a replayed chunk past the update budget fails the model."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from modelcompare.estimators import BudgetExceeded, Deadline, Progress, Rows
from modelcompare.service.catch_up import catch_up
from modelcompare.service.core.config import Settings
from modelcompare.service.progress import ComparisonProgress, ModelProgress, Reading
from modelcompare.service.store.history import BlockHistory
from modelcompare.service.store.work_records import Snapshot


class SlowRunner:
    """A runner whose update of a chunk computes for ``seconds`` (CPU, as the budget counts) and
    counts the rows absorbed; it raises ``BudgetExceeded`` when that is past the deadline it
    was given."""

    name = "late"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadlines: list[Deadline | None] = []

    def load(self, state: bytes) -> int:
        return int(state)

    def update(self, state: int, rows: Rows, history: Any, sequence: int,
               deadline: Deadline | None = None) -> tuple[int, None]:
        self.deadlines.append(deadline)
        done = time.thread_time() + self.seconds
        while time.thread_time() < done:
            pass
        if deadline is not None and deadline.passed():
            raise BudgetExceeded(Progress(0, None, 0))
        return state + rows.count, None

    def reading(self, state: int, info: None) -> Reading:
        return Reading(n_observations=state, log_evidence=0.0, log_evidence_stderr=0.0,
                       ess=None, info=info)


def replay(runner: SlowRunner, chunks: int, budget: float) -> tuple[int, ModelProgress]:
    history = BlockHistory(1, has_y=False)
    for _ in range(chunks):
        history.append(Rows(torch.zeros(3, 1, dtype=torch.float64), None))
    model = ModelProgress(sequence=0, n_observations=0, log_evidence=None,
                          log_evidence_stderr=None, ess=None, info=None, catching_up=True)
    progress = ComparisonProgress(version=1, sequence=chunks, n_observations=3 * chunks,
                                  models={runner.name: model})
    snap = Snapshot(spec=None, version=1, sequence=chunks,  # type: ignore[arg-type]
                    progress=progress, states={runner.name: b"0"})
    settings = Settings(batch_chunks=chunks, evidence_window_rows=100, update_budget=budget)
    return catch_up(runner, snap, model, history, settings)  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_replay_step_stops_once_the_update_budget_has_passed() -> None:
    runner = SlowRunner(0.3)
    state, summary = replay(runner, chunks=8, budget=0.5)
    # the first chunk ends near 0.3 s, the second starts before 0.5 s: no third one this step
    assert (state, summary.sequence, summary.catching_up) == (6, 2, True)
    assert all(deadline is not None for deadline in runner.deadlines)
    assert summary.failed is None


def test_a_replayed_chunk_past_the_budget_fails_the_model_and_keeps_its_state() -> None:
    runner = SlowRunner(0.2)
    state, summary = replay(runner, chunks=4, budget=0.1)
    assert state == 0 and summary.catching_up is False
    assert summary.failed is not None
    assert summary.failed.startswith("BudgetExceeded: the update ran past its deadline")
