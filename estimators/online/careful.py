"""The careful ladder: the steps of a long piece with a higher ESS target, longer moves and more
particles (docs/design/careful-ladder.md).

A piece that takes more than ``careful_steps`` annealing steps moves the particles far, and two
errors then grow with its length: moves too short to settle on each π_λ lead or lag the moving
posterior, and log Ẑ's finite-M bias accumulates step by step (about −½ the variance of each
step's increment, so ∝ (1/ESS_target − 1)/M per step). Past the exact phase its remaining steps
use the careful parts: a higher ESS target and longer trajectories, with ``careful_particles`` × M
particles, resampled up at the first careful step (widen) and back to M after the last (narrow).
A ``StepRule`` and an ``AfterPiece`` of the piece kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from modelcompare.estimators.online.kernel import (
    Adjustment,
    AfterPiece,
    Annealed,
    Parts,
    PieceEnv,
    StepRule,
)
from modelcompare.estimators.smc.resampling import (
    Resampler,
    Selection,
    equal_log_weights,
    resample_to,
)


class Careful(NamedTuple):
    steps: int  # the steps of a piece past this many are careful
    parts: Parts  # the careful parts
    particles: int  # this many times M during the careful steps (1: M)
    resampler: Resampler  # of the widening and the narrowing


def turns_careful(after: int, steps: int, temperature: float) -> bool:
    """Whether the careful parts take over at step ``steps``, the piece having reached
    ``temperature``: at step ``after``, or after the first step when that step predicts a longer
    ladder (steps like it would take 1/λ₁ of them), so that a long piece runs careful nearly
    throughout."""
    return steps == after or (steps == 1 and temperature * after < 1.0)


class CarefulRun(NamedTuple):
    """The step rule's state within one piece."""

    turned: bool
    widen: Selection | None  # the first careful step's selection (None: M particles throughout)


def step_rule(careful: Careful) -> StepRule:
    """Careful parts once a piece past the exact phase turns careful, the first of its careful
    steps resampling up to ``careful.particles`` × M."""

    def start(env: PieceEnv) -> CarefulRun | None:
        # while the past is used in full, pieces anneal away from the prior and long ladders are
        # expected: there, extra steps of moves whose mass matrix is the covariance of only M
        # particles bias log Ẑ upwards (docs/design/careful-ladder.md)
        if len(env.history) <= env.full_batch_rows:
            return None
        if careful.particles == 1:
            return CarefulRun(False, None)
        return CarefulRun(False, resample_to(env.particles * careful.particles, careful.resampler))

    def update(run: CarefulRun, steps: int, temperature: float) -> tuple[CarefulRun, Adjustment]:
        if run.turned or not turns_careful(careful.steps, steps, temperature):
            return run, Adjustment()
        return run._replace(turned=True), Adjustment(careful.parts, run.widen)

    return StepRule(start, update)


def narrowing(careful: Careful) -> AfterPiece:
    """Back to M equally weighted particles after a piece that widened; the selection is kept
    for the genealogy of the next piece."""

    def after(env: PieceEnv, piece: Annealed) -> Annealed:
        if piece.particles.shape[0] == env.particles:
            return piece
        weights = torch.exp(piece.log_weights)
        ancestors = careful.resampler(weights, env.generator, env.particles)
        return piece._replace(
            particles=piece.particles[ancestors],
            log_weights=equal_log_weights(piece.log_weights, env.particles),
            selection=(piece.log_weights, ancestors),
        )

    return after
