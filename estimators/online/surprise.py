"""Surprise moves: more moves at λ = 1 after a surprising piece (docs/design/surprise-moves.md).

After a change point a piece's ESS collapses: the particles arrive far from the new posterior, a
few survive the reweighting, and the per-piece moves (one trajectory per annealing step, on
control variates anchored where the posterior used to be) leave them behind it; the next pieces
then inherit a biased cloud whose bias the error bar does not see. So after a piece that took
more than ``surprise_steps`` annealing steps, or whose ESS fell below ``surprise_ess`` · M, the
anchor is re-set at the new weighted mean and ``surprise_moves`` more moves are made on the
posterior given the past and the piece. An ``AfterPiece`` of the piece kernel.
"""

from __future__ import annotations

import functools

from modelcompare.estimators.deadline import check_deadline
from modelcompare.estimators.errors import Progress
from modelcompare.estimators.online.extension_settings import SurpriseSettings
from modelcompare.estimators.online.kernel import AfterPiece, Annealed, PieceEnv
from modelcompare.estimators.online.target import Piece, anchor_at_mean, past_data, with_piece
from modelcompare.estimators.smc.covariance import particle_scale
from modelcompare.estimators.smc.tempered import StepInfo, settled


def surprising(settings: SurpriseSettings, steps: tuple[StepInfo, ...], particles: int) -> bool:
    least_ess = min((info.ess for info in steps), default=float(particles))
    return len(steps) > settings.surprise_steps or least_ess < settings.surprise_ess * particles


def surprise_moves(settings: SurpriseSettings) -> tuple[AfterPiece, ...]:
    """The kernel's ``AfterPiece`` (none when ``surprise_moves`` is 0)."""

    def after(env: PieceEnv, piece: Annealed) -> Annealed:
        if not surprising(settings, piece.steps, piece.particles.shape[0]):
            return piece
        return rejuvenated(env, piece, settings.surprise_moves)

    return (after,) if settings.surprise_moves else ()


def rejuvenated(env: PieceEnv, piece: Annealed, moves: int) -> Annealed:
    """``moves`` more moves of the method's parts on the posterior given the past and the
    piece, with the anchor (when the past is read in minibatches with control variates) re-set
    at the weighted mean."""
    fresh = None
    if env.past.control_variates and len(env.history) > env.full_batch_rows:
        at_mean = anchor_at_mean(env.model, piece.particles, piece.log_weights, env.history)
        fresh = with_piece(env.model, at_mean, env.rows)
    past = past_data(env.history, env.full_batch_rows, env.past.batch_size, fresh)
    smc = env.parts(Piece(env.model, env.rows, past))
    checkpoint = functools.partial(
        check_deadline, env.deadline, Progress(env.absorbed_rows, 1.0, len(piece.steps))
    )
    particles = piece.particles
    log_likelihood = smc.log_likelihood(particles)
    for _ in range(moves):
        checkpoint()
        scale = particle_scale(particles, piece.log_weights)
        moved = smc.move(particles, 1.0, scale, env.generator, checkpoint).particles
        particles, log_likelihood, _ = settled(smc, particles, moved, 1.0, log_likelihood)
    if fresh is None:
        return piece._replace(particles=particles, extra_moves=True)
    return piece._replace(particles=particles, anchor=fresh, reanchored=True, extra_moves=True)
