"""Fake parts of the piece kernel for its tests on a fake inner kernel: a tempered-SMC step that
anneals a piece in at once, keeps the weights and moves every particle by a fixed shift, and a
recorder of the parts each piece was given."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from modelcompare.estimators.data.history import InMemoryHistory, Rows
from modelcompare.estimators.deadline import Checkpoint
from modelcompare.estimators.online.kernel import Parts
from modelcompare.estimators.online.target import Piece
from modelcompare.estimators.smc.resampling import Selected
from modelcompare.estimators.smc.tempered import Moved, TemperedSMC, TemperedState
from modelcompare.models import LinearRegression

F64 = torch.float64


def keep(
    particles: Tensor, log_weights: Tensor, ess: float, generator: torch.Generator
) -> Selected:
    """The parts' own selection: the particles as they are."""
    return Selected(particles, log_weights, False)


def at_once(log_weights: Tensor, log_likelihood: Tensor, remaining: float) -> float:
    """The temperature rule of a ladder of one step."""
    return remaining


def one_step(piece: Piece, shift: float = 0.0, moved: list[int] | None = None) -> TemperedSMC:
    """Parts that anneal ``piece`` in one step and move every coordinate by ``shift``,
    appending the count of particles moved to ``moved``."""

    def move(particles: Tensor, temperature: float, scale: Tensor, generator: torch.Generator,
             checkpoint: Checkpoint) -> Moved:
        if moved is not None:
            moved.append(particles.shape[0])
        return Moved(particles + shift, ())

    return TemperedSMC(piece.log_likelihood, at_once, keep, move)


def level(piece: Piece) -> TemperedSMC:
    """``one_step`` parts whose likelihood is e^−1 per row whatever θ: the weights stay as they
    are and log Ẑ of n rows is exactly −n."""
    count = piece.rows.count
    return one_step(piece)._replace(
        log_likelihood=lambda theta: torch.full((theta.shape[0],), -float(count), dtype=F64)
    )


def recorder(made: list[tuple[str, Piece]], name: str) -> Parts:
    """``one_step`` parts that record (``name``, the piece) each time they are built."""

    def parts(piece: Piece) -> TemperedSMC:
        made.append((name, piece))
        return one_step(piece)

    return parts


def setting(seed: int = 0) -> tuple[LinearRegression, InMemoryHistory, Rows]:
    """A linear regression (θ in R³), 500 rows of past and a piece of 100 after them."""
    g = torch.Generator().manual_seed(seed)
    model = LinearRegression(2)
    x = torch.randn(600, 2, generator=g, dtype=F64)
    y = x @ torch.tensor([1.0, -1.0], dtype=F64) + torch.randn(600, generator=g, dtype=F64)
    history = InMemoryHistory(2)
    history.append(Rows(x[:500], y[:500]))
    return model, history, Rows(x[500:], y[500:])


def cloud(centre: list[float], seed: int = 1, temperature: float = 0.5) -> TemperedState:
    """64 equally weighted particles within 0.01 of ``centre``, at ``temperature``."""
    g = torch.Generator().manual_seed(seed)
    particles = torch.tensor(centre, dtype=F64) + 0.01 * torch.randn(64, 3, generator=g, dtype=F64)
    return TemperedState(particles, torch.full((64,), -math.log(64), dtype=F64), None,  # type: ignore[arg-type]
                         temperature)
