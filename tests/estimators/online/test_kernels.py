"""The online move kernels' wiring: a noise-limited SGHMC move draws a minibatch per step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from modelcompare.estimators.data.history import InMemoryHistory, Rows
from modelcompare.estimators.moves import sghmc as sghmc_moves
from modelcompare.estimators.online import kernels
from modelcompare.estimators.online.settings import SGAISSettings
from modelcompare.estimators.online.target import Piece, past_data
from modelcompare.models import LinearRegression


@pytest.mark.parametrize("lr", [1e-4, 10.0])
def test_a_move_too_noisy_for_its_step_runs_more_shorter_steps_on_fresh_minibatches(
    lr: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At lr 10 a 100-row minibatch's noise needs more friction than the ceiling: the move
    runs with a shorter step and more steps, each on a minibatch of its own (the gradients run
    out otherwise); at lr 1e-4 it runs as given."""
    g = torch.Generator().manual_seed(0)
    model = LinearRegression(3)
    x = torch.randn(2_000, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([0.5, -1.0, 0.2], dtype=torch.float64) + torch.randn(
        2_000, generator=g, dtype=torch.float64)
    history = InMemoryHistory(3, has_y=True)
    history.append(Rows(x[:1_900], y[:1_900]))
    past = past_data(history, 100, 50, None)
    params = SGAISSettings(lr=lr).sghmc
    theta = 0.05 * torch.randn(16, model.param_dim, generator=g, dtype=torch.float64)
    scale = 0.03 * torch.eye(model.param_dim, dtype=torch.float64)
    taken = []
    original = sghmc_moves.sghmc_move

    def spy(*args: Any) -> sghmc_moves.Trajectories:
        taken.append((args[2], args[5]))  # the step η and the steps
        return original(*args)

    monkeypatch.setattr(kernels, "sghmc_move", spy)
    move = kernels.sghmc(Piece(model, Rows(x[1_900:], y[1_900:]), past), params, torch.float64)
    moved = move(theta, 0.5, scale, torch.Generator().manual_seed(1), lambda: None)
    (step, steps), = taken
    if lr == 1e-4:
        assert (step, steps) == (lr, params.steps)
    else:
        assert step < lr and params.steps < steps <= sghmc_moves.MAX_STEPS_FACTOR * params.steps
    assert bool(torch.isfinite(moved.particles).all())
    assert not torch.equal(moved.particles, theta)
