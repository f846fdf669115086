"""The parts of each annealing step of one piece: a control-variate anchor that follows the
particles, and a more careful ladder once the piece turns out to be a long one.

Anchor. The minibatch gradient of the past (``target``) is exact at its anchor θ_a, and its noise
grows with |θ − θ_a|: for a linear-Gaussian row ∇ℓ_b(θ) − ∇ℓ_b(θ_a) = −x_b x_bᵀ (θ − θ_a). After
a change point the posterior moves many standard deviations within one piece, so an anchor set
when the piece began leaves the moves on ever noisier gradients (SGHMC then samples a law hotter
than π_λ). Between annealing steps the anchor is re-set at the weighted particle mean once that
mean is more than ``anchor_drift`` weighted standard deviations from it (``surprise.drifted``, as
between pieces): one pass over the past at one point, n row gradients, against M · steps ·
batch_size for one move.

Long ladders. A piece that takes more than ``surprise.steps`` annealing steps moves the particles
far, and two errors then grow with its length: moves too short to settle on each π_λ lead or lag
the moving posterior, and log Ẑ's finite-M bias accumulates step by step (about −½ the variance
of each step's increment, so ∝ (1/ESS_target − 1)/M per step). Its remaining steps use the
``careful`` parts: a higher ESS target and longer trajectories (benchmarks/README.md,
"calibration.py").
"""

from __future__ import annotations

from collections.abc import Callable

from modelcompare.estimators.data.history import Rows
from modelcompare.estimators.online.surprise import drifted
from modelcompare.estimators.online.target import (
    Anchor,
    PastData,
    Piece,
    anchor_at_mean,
    with_piece,
)
from modelcompare.estimators.smc.resampling import Selection
from modelcompare.estimators.smc.tempered import TemperedSMC, TemperedState
from modelcompare.models import Model

Parts = Callable[[Piece], TemperedSMC]


class PieceParts:
    """``refresh`` gives each next step's parts (for ``smc.tempered.anneal``); ``anchor`` is the
    anchor in use and ``moved`` whether it was re-set during the piece."""

    def __init__(
        self,
        model: Model,
        rows: Rows,
        past: PastData,
        parts: Parts,
        anchor_drift: float,
        careful: tuple[int, Parts] | None = None,  # (after this many steps, these parts)
        widen: Selection | None = None,  # the careful parts' first selection (more particles)
    ) -> None:
        self.model, self.rows, self.past = model, rows, past
        self.make, self.anchor_drift, self.careful = parts, anchor_drift, careful
        self.anchor: Anchor | None = past.anchor
        self.moved = False
        self.widen = widen
        self.widening = False
        self.steps = 0
        self.first = parts(Piece(model, rows, past))
        self.current = self.first

    def refresh(self, state: TemperedState) -> TemperedSMC:
        self.steps += 1
        rebuild = False
        if self.widening:
            self.widening, rebuild = False, True
        if self.careful is not None and self.turns_careful(state.temperature):
            self.make, rebuild = self.careful[1], True
            self.widening = self.widen is not None
            self.careful = None
        if self.anchor is not None and drifted(
            state.particles, state.log_weights, self.anchor.point, self.anchor_drift
        ):
            at_mean = anchor_at_mean(
                self.model, state.particles, state.log_weights, self.past.history
            )
            self.anchor = with_piece(self.model, at_mean, self.rows)
            self.past = self.past._replace(anchor=self.anchor)
            self.moved = rebuild = True
        if rebuild:
            self.current = self.make(Piece(self.model, self.rows, self.past))
            if self.widening:
                assert self.widen is not None
                self.current = self.current._replace(selection=self.widen)
        return self.current

    def turns_careful(self, temperature: float) -> bool:
        """Whether the careful parts take over now, the piece having reached ``temperature``: at
        step ``careful[0]``, or after the first step when that step predicts a longer ladder
        (steps like it would take 1/λ₁ of them), so that a long piece runs careful nearly
        throughout."""
        assert self.careful is not None
        after = self.careful[0]
        return self.steps == after or (self.steps == 1 and temperature * after < 1.0)
